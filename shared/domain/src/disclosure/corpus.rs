//! The detection corpus: inputs and the findings expected in them, near-misses included.

use super::Finding::{self, *};

/// A valid test ID number (the textbook example, check character X).
pub(super) const ID: &str = "11010519491231002X";
pub(super) const OPENAI_KEY: &str = "sk-proj-Abc123Def456Ghi789Jkl012";

/// (input, findings in order). Near-misses expect nothing.
pub(super) const CORPUS: &[(&str, &[Finding])] = &[
    // --- API keys ---
    ("use sk-proj-Abc123Def456Ghi789Jkl012 for now", &[ApiKey]),
    ("key:sk-abcdefghijklmnopqrstuvwxyz012345", &[ApiKey]),
    ("密钥sk-abcdefghijklmnopqrstuvwxyz012345谢谢", &[ApiKey]),
    ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", &[ApiKey]),
    ("github_pat_11ABCDEFG0123456789_abcdefghij", &[ApiKey]),
    ("aws AKIAIOSFODNN7EXAMPLE here", &[ApiKey]),
    ("slack xoxb-1234567890-abcdefghij", &[ApiKey]),
    ("maps AIzaSyD-0123456789abcdefghijABCDEFGHIJ_ ok", &[ApiKey]),
    ("api_key=abcd1234efgh5678", &[ApiKey]),
    ("export OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz012345", &[ApiKey]),
    // --- tokens ---
    ("GITHUB_TOKEN: 0123456789abcdef", &[Token]),
    (r#"{"access_token": "ya29.a0AfH6SMBx-long-token"}"#, &[Token]),
    ("client_secret = 's3cr3t-value-here'", &[Token]),
    ("Authorization: Bearer abcdef0123456789xyz", &[Token]),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        &[Token],
    ),
    // --- passwords ---
    ("postgres://app:hunter2@db.internal:5432/app", &[UrlPassword]),
    ("redis://:s3cret@cache:6379", &[UrlPassword]),
    ("login?user=bob&password=hunter2", &[Password]),
    ("passwd: correct-horse", &[Password]),
    ("pwd=abc123", &[Password]),
    ("数据库密码：Xy9#kq", &[Password]),
    ("DB_PASSWORD='p@ss word'", &[Password]),
    // --- phones ---
    ("call me at 13812345678.", &[Phone]),
    ("手机13912345678谢谢", &[Phone]),
    ("电话：+86 138 1234 5678", &[Phone]),
    ("86-139-1234-5678", &[Phone]),
    ("office +1 (415) 555-2671", &[Phone]),
    ("London +44 20 7946 0958", &[Phone]),
    // --- ID numbers ---
    ("身份证11010519491231002X", &[ChineseId]),
    ("id 11010519491231002x", &[ChineseId]),
    // --- bank cards ---
    ("card 4111 1111 1111 1111 exp 12/28", &[BankCard]),
    ("4111111111111111", &[BankCard]),
    ("5500-0000-0000-0004", &[BankCard]),
    ("amex 378282246310005", &[BankCard]),
    ("银行卡6222021234567890128", &[BankCard]),
    // --- e-mail ---
    ("mail zhang.san@example.com", &[Email]),
    ("写信到li.si+work@mail.example.cn吧", &[Email]),
    ("13812345678@163.com", &[Email]),
    // --- mobile numbers in groups (the `x`-flag class bug let these through) ---
    ("call 138 1234 5678 tonight", &[Phone]),
    ("call 138-1234-5678 tonight", &[Phone]),
    ("+86 138 1234 5678", &[Phone]),
    ("+86-138-1234-5678", &[Phone]),
    ("+8613812345678", &[Phone]),
    ("0086 138 1234 5678", &[Phone]),
    ("0086-13812345678", &[Phone]),
    ("(+86) 139 1234 5678", &[Phone]),
    ("（+86）13912345678", &[Phone]),
    ("手机：138 1234 5678，谢谢", &[Phone]),
    ("手机号138　1234　5678", &[Phone]), // ideographic spaces
    ("tel 86 138 1234 5678", &[Phone]),
    ("confirm with 15012345678 before paying", &[Phone]),
    // --- landlines ---
    ("office 010-12345678", &[Phone]),
    ("office (010) 1234 5678", &[Phone]),
    ("office (010)12345678", &[Phone]),
    ("办公室（010）12345678", &[Phone]),
    ("深圳 0755 8888 6666", &[Phone]),
    ("0755-88886666", &[Phone]),
    ("上海021-6123-4567转802", &[Phone]),
    ("021-6123-4567 ext 89", &[Phone]),
    ("021-6123-4567 ext. 89", &[Phone]),
    ("021-6123-4567-801", &[Phone]),
    ("0371-123-4567", &[Phone]),
    ("0086 10 1234 5678", &[Phone]),
    ("+86 10 1234 5678", &[Phone]),
    ("+86 (21) 6123 4567", &[Phone]),
    // --- ID numbers written in groups ---
    ("身份证 110101 19900307 1233", &[ChineseId]),
    ("ID 110101-19900307-1233", &[ChineseId]),
    ("ID 440304 19900307 123X", &[ChineseId]),
    ("ID 440304-1990-0307-123x", &[ChineseId]),
    ("身份证号：110105 19491231 002X。", &[ChineseId]),
    ("ID 310115198511204566", &[ChineseId]),
    ("ID 4403 0419 9003 0712 3X", &[ChineseId]),
    // --- credentials after camel-case and other key names ---
    ("SecretAccessKey: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", &[ApiKey]),
    ("secretAccessKey=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", &[ApiKey]),
    (r#"{"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}"#, &[ApiKey]),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", &[ApiKey]),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", &[ApiKey]),
    ("clientSecret: 8f1c2d3e4b5a69788796a5b4", &[Token]),
    (r#"{"clientSecret":"8f1c2d3e4b5a69788796a5b4"}"#, &[Token]),
    ("apiKey=a1b2c3d4e5f6g7h8i9j0", &[ApiKey]),
    ("const apiKey = 'a1b2c3d4e5f6g7h8i9j0';", &[ApiKey]),
    ("accessToken: a1b2c3d4e5f6g7h8i9j0", &[Token]),
    ("refreshToken=a1b2c3d4e5f6g7h8i9j0k1", &[Token]),
    ("X-Api-Key: a1b2c3d4e5f6g7h8i9j0", &[ApiKey]),
    ("AccessKeySecret: 8f1c2d3e4b5a69788796a5b4", &[Token]),
    ("appSecret=8f1c2d3e4b5a69788796a5b4", &[Token]),
    ("EncodingAESKey: abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG", &[ApiKey]),
    ("dbPassword: hunter2", &[Password]),
    ("adminPwd=abc123", &[Password]),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", &[Token]),
    (r#""authorization": "Bearer abcdef0123456789xyz""#, &[Token]),
    ("authorization: token 0123456789abcdef0123", &[Token]),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1abc\n-----END RSA PRIVATE KEY----- done",
        &[PrivateKey],
    ),
    ("key: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA", &[PrivateKey]),
    ("privateKey=0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318", &[PrivateKey]),
    // --- several, in order of appearance ---
    (
        "a@b.io, 13812345678, sk-abcdefghijklmnopqrstuvwxyz012345",
        &[Email, Phone, ApiKey],
    ),
    // --- near-misses: nothing to redact ---
    ("身份证110105194912310021", &[]), // wrong MOD 11-2 check digit
    ("card 4111 1111 1111 1112", &[]), // fails Luhn
    ("1381234567", &[]),               // 10 digits
    ("run 98765138123456780000", &[]), // 11-digit mobile inside a 20-digit run
    ("upgrade 1.2.3 to 13.8.1234.5678", &[]),
    ("due 2026-11-30", &[]),
    ("at 20261130123045", &[]),
    ("at 20261130123049", &[]), // a timestamp that happens to pass Luhn
    ("order 202611301234567890", &[]), // date-prefixed 18-digit order number
    ("epoch ms 1764460800000", &[]),
    ("task-list and risk-free-investment-strategy-2026", &[]),
    ("desk-organizer-and-storage-boxes", &[]),
    ("see https://example.com/a?b=c", &[]),
    ("https://example.com:8080/path", &[]),
    ("@zhang 看一下", &[]),
    ("psql -U user@localhost", &[]),
    ("git@github.com:baton/fleet.git", &[]),
    ("ssh://git@github.com/baton/fleet.git", &[]),
    ("forgot my password again", &[]),
    ("password:\nnext line", &[]),
    ("max_tokens: 128000000000000", &[]),
    ("token: short", &[]),
    ("api_key=${OPENAI_API_KEY}", &[]),
    ("password=$DB_PASSWORD", &[]),
    ("the bearer responsibilities", &[]),
    ("+1 to this idea", &[]),
    ("uuid 550e8400-e29b-41d4-a716-446655440000", &[]),
    ("uuid 123e4567-e89b-12d3-a456-426614174000", &[]),
    ("commit 3f786850e387550fdab836ed7e6dc881de23001b", &[]),
    ("commit 9fceb02d0ae598e95dc970b74767f19372d61af8", &[]),
    ("pi 3.14159265358979323", &[]),
    ("host 192.168.100.138", &[]),
    ("身份证 110101 19900307 123X", &[]), // wrong check character
    ("ID 110101-19900230-1233", &[]),    // no 30 February
    ("version 13.8.1234.5678 and v138.1234.5678", &[]),
    ("2026-11-30 13:45:00", &[]),
    ("2026-11-30T13:45:00+08:00", &[]),
    ("at 13:45, then 13:8:12", &[]),
    ("epoch 1764460800 and 1764460800123", &[]),
    ("price ¥138.00 or 1380元, total 13,812.45", &[]),
    ("price 0.0755 per unit", &[]),
    ("订单号 202611301381234567", &[]),
    ("order 20261130-1381-2345", &[]),
    ("sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", &[]),
    ("uuid 01938f4e-1381-7234-8567-0755888866660", &[]),
    ("max_tokens: 4096, tokenizer: cl100k_base", &[]),
    ("tokenBudget: 100000000000000", &[]),
    ("secretName: my-app-secret-v2", &[]),
    ("accessKeyId: someid12345678", &[]),
    ("api_key_env = \"DEEPSEEK_API_KEY\"", &[]),
    ("apiKey: ${API_KEY}", &[]),
    ("accessToken=<your-token>", &[]),
    ("Authorization: required for every call", &[]),
    ("rotate the private key monthly", &[]),
    ("room 0101 floor 2", &[]),
];
