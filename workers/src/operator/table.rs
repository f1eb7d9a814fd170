//! The command line's tables and durations.
//!
//! Tables are `comfy-table`'s, without borders: it sizes each column by
//! the display width of its widest cell (a Chinese chat name is two columns
//! a character), where `format!("{:<9}")` counts characters and is ignored
//! altogether by a `Display` that writes its text without padding (every
//! wire enum's does), which is how `runs list` came out of line.

use chrono::Duration;
use comfy_table::{CellAlignment, ContentArrangement, Table};

/// A table with these column headers; the columns in `right` are right-aligned (numbers).
pub fn new(header: &[&str], right: &[usize]) -> Table {
    let mut table = Table::new();
    table.load_style(comfy_table::presets::NOTHING).set_content_arrangement(ContentArrangement::Disabled);
    table.set_header(header.iter().copied());
    // Two blanks between columns, none before the first.
    table.column_iter_mut().for_each(|column| {
        column.set_padding((0, 2));
    });
    for &i in right {
        if let Some(column) = table.column_mut(i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

/// The table as lines without trailing blanks, ending with a newline.
pub fn render(table: &Table) -> String {
    table.lines().map(|line| format!("{}\n", line.trim_end())).collect()
}

/// `420ms`, `4.2s`, `42s`, `1m 5s`, `1h 2m`, `3d 4h`: a short human duration.
pub fn duration(d: Duration) -> String {
    let ms = d.num_milliseconds().max(0);
    let secs = ms / 1000;
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=9_999 => format!("{:.1}s", ms as f64 / 1000.0),
        10_000..=59_999 => format!("{secs}s"),
        60_000..=3_599_999 => format!("{}m {}s", secs / 60, secs % 60),
        3_600_000..=86_399_999 => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d {}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

/// One line of `text`: line breaks become spaces.
pub fn one_line(text: &str) -> String {
    text.split(['\n', '\r']).filter(|part| !part.is_empty()).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_short_and_sub_second_ones_are_shown() {
        assert_eq!(duration(Duration::milliseconds(0)), "0ms");
        assert_eq!(duration(Duration::milliseconds(420)), "420ms");
        assert_eq!(duration(Duration::milliseconds(4_240)), "4.2s");
        assert_eq!(duration(Duration::seconds(42)), "42s");
        assert_eq!(duration(Duration::seconds(65)), "1m 5s");
        assert_eq!(duration(Duration::seconds(3725)), "1h 2m");
        assert_eq!(duration(Duration::hours(76)), "3d 4h");
    }

    #[test]
    fn columns_line_up_whatever_the_width_of_their_cells() {
        let mut t = new(&["id", "status", "n"], &[2]);
        t.add_row(["a", "completed", "7"]);
        t.add_row(["bbbbbbbb", "failed", "1234"]);
        t.add_row(["微信群", "running", "0"]);
        let text = render(&t);
        let lines: Vec<&str> = text.lines().collect();
        let column = |line: &str, word: &str| {
            let at = line.find(word).unwrap();
            unicode_width(&line[..at])
        };
        assert_eq!(column(lines[1], "completed"), column(lines[2], "failed"), "{text}");
        assert_eq!(column(lines[2], "failed"), column(lines[3], "running"), "{text}");
        assert_eq!(unicode_width(lines[1]), unicode_width(lines[2]), "numbers are right-aligned: {text}");
        assert!(text.lines().all(|l| !l.ends_with(' ')));
    }

    /// Display columns, counting a CJK character as two.
    fn unicode_width(s: &str) -> usize {
        s.chars().map(|c| if ('\u{4e00}'..='\u{9fff}').contains(&c) { 2 } else { 1 }).sum()
    }
}
