// Checks the contract with tools a bridge developer uses (run through
// scripts/contract-check, after `npm ci`):
// 1. asyncapi.yaml parses and validates as AsyncAPI 3 (@asyncapi/parser),
//    with every referenced schema resolved;
// 2. every generated JSON Schema compiles in ajv (draft-07, with formats);
// 3. ajv gives the same verdict as Baton's parser on every corpus body:
//    corpus/good/* are valid HandoffRequests, corpus/bad/* are not (the Rust
//    test `the_corpus_gets_the_same_verdict_from_the_parser_and_the_schema`
//    checks the same files with Baton's parser and the `jsonschema` crate).
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { DiagnosticSeverity, Parser, fromFile } from "@asyncapi/parser";
import Ajv from "ajv";
import addFormats from "ajv-formats";

const here = dirname(fileURLToPath(import.meta.url));
let failures = 0;
const fail = (message) => {
  failures += 1;
  console.error(`FAIL ${message}`);
};

async function checkAsyncApi() {
  const parser = new Parser();
  const { document, diagnostics } = await fromFile(parser, join(here, "asyncapi.yaml")).parse();
  for (const d of diagnostics.filter((d) => d.severity === DiagnosticSeverity.Error)) {
    fail(`asyncapi.yaml ${d.path.join(".")}: ${d.message}`);
  }
  if (!document) {
    fail("asyncapi.yaml does not parse");
    return;
  }
  console.log(`asyncapi.yaml: AsyncAPI ${document.version()}, ${document.channels().length} channels, ${document.operations().length} operations, ${document.messages().length} messages`);
}

function schemas() {
  // Formats schemars writes for integers; ajv knows only the JSON Schema ones.
  const ajv = new Ajv({ allErrors: true, strict: true, formats: { int32: true, uint32: true } });
  addFormats(ajv);
  const dir = join(here, "schema");
  const compiled = {};
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".schema.json")).sort()) {
    const name = file.replace(".schema.json", "");
    try {
      compiled[name] = ajv.compile(JSON.parse(readFileSync(join(dir, file), "utf8")));
    } catch (e) {
      fail(`schema/${file} does not compile: ${e.message}`);
    }
  }
  console.log(`schema/: ${Object.keys(compiled).length} schemas compile`);
  return compiled;
}

function checkCorpus(validate) {
  const before = failures;
  let count = 0;
  for (const [kind, valid] of [["good", true], ["bad", false]]) {
    const dir = join(here, "corpus", kind);
    for (const file of readdirSync(dir).filter((f) => f.endsWith(".json")).sort()) {
      count += 1;
      const body = JSON.parse(readFileSync(join(dir, file), "utf8"));
      if (validate(body) !== valid) {
        const why = valid ? JSON.stringify(validate.errors) : "accepted";
        fail(`corpus/${kind}/${file}: the schema says ${valid ? "invalid" : "valid"}, Baton's parser the opposite (${why})`);
      }
    }
  }
  const disagree = failures - before;
  console.log(`corpus/: ${count} bodies, ajv ${disagree === 0 ? "agrees with Baton's parser on each" : `disagrees on ${disagree}`}`);
}

await checkAsyncApi();
const compiled = schemas();
if (compiled.HandoffRequest) {
  checkCorpus(compiled.HandoffRequest);
}
if (failures > 0) {
  console.error(`${failures} contract check(s) failed`);
  process.exit(1);
}
