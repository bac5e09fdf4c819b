//! A minimal CSV table reader for competition files (header + rows of
//! comma-separated fields, optional double quotes). It reads; it never
//! guesses types: callers parse the fields they need.

use std::path::Path;

use crate::error::{Error, Result, io_err};

/// A CSV file held as strings.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

fn split_line(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter().map(|s| s.trim().to_string()).collect()
}

impl Table {
    /// Parse CSV text; every row must have as many fields as the header.
    /// A leading UTF-8 byte-order mark is dropped (as pandas does).
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let header = split_line(lines.next().ok_or_else(|| Error::Csv {
            path: path.into(),
            reason: "empty file".into(),
        })?);
        let mut rows = Vec::new();
        for (i, line) in lines.enumerate() {
            let row = split_line(line);
            if row.len() != header.len() {
                return Err(Error::Csv {
                    path: path.into(),
                    reason: format!(
                        "row {} has {} fields, header {}",
                        i + 1,
                        row.len(),
                        header.len()
                    ),
                });
            }
            rows.push(row);
        }
        Ok(Self { header, rows })
    }

    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(io_err(path))?;
        Self::parse(&text, path)
    }

    /// Index of a named column.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_quotes_and_rejects_ragged_rows() {
        let t = Table::parse("a,b\n1,\"x,y\"\n2,\"q\"\"\"\n", Path::new("t")).unwrap();
        assert_eq!(t.rows[0], vec!["1", "x,y"]);
        assert_eq!(t.rows[1][1], "q\"");
        assert!(Table::parse("a,b\n1,2,3\n", Path::new("t")).is_err());
        assert!(Table::parse("", Path::new("t")).is_err());
    }
}
