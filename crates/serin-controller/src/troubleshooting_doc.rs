//! docs/troubleshooting.md against the code: every Event reason the operator records has its
//! section, and every message the page quotes is still written by the code. (A unit test of this
//! crate, so the suite links no extra test binary for it.)

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn page() -> String {
    std::fs::read_to_string(workspace().join("docs/troubleshooting.md"))
        .expect("docs/troubleshooting.md is readable")
}

/// The text of every Rust source file under `dir`.
fn sources(dir: &Path, into: &mut String) {
    for entry in std::fs::read_dir(dir).expect("a source directory is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, into);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            into.push_str(&std::fs::read_to_string(&path).expect("a source file is readable"));
        }
    }
}

/// The code spans of the page that quote a message: four words or more, not a command.
fn quoted_messages(page: &str) -> Vec<String> {
    let mut messages = Vec::new();
    for line in page.lines().filter(|line| !line.starts_with('#')) {
        for (index, span) in line.split('`').enumerate() {
            let is_code = index % 2 == 1;
            let is_command = ["kubectl ", "POST ", "/", "e2e/", "crates/"]
                .iter()
                .any(|start| span.starts_with(start));
            if is_code && !is_command && span.split_whitespace().count() >= 4 {
                messages.push(span.to_string());
            }
        }
    }
    messages
}

/// The literal parts of a quoted message: the text between `<placeholders>` and `...`.
fn literal_parts(message: &str) -> Vec<String> {
    let text = message.replace("...", "<>");
    let mut parts = vec![String::new()];
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        // A `<` followed by a space is a comparison, not a placeholder.
        let placeholder = c == '<' && !text[at + 1..].starts_with(' ') && text[at..].contains('>');
        if placeholder {
            for (_, skipped) in chars.by_ref() {
                if skipped == '>' {
                    break;
                }
            }
            parts.push(String::new());
        } else if let Some(last) = parts.last_mut() {
            last.push(c);
        }
    }
    parts.retain(|part| !part.is_empty());
    parts
}

#[test]
fn every_reason_the_operator_records_has_a_section() {
    let page = page();
    let headings: Vec<&str> = page.lines().filter(|l| l.starts_with("## ")).collect();
    let missing: Vec<&&str> = serin_core::plan::reason::ALL
        .iter()
        .filter(|reason| {
            !headings
                .iter()
                .any(|heading| heading.contains(&format!("`{reason}`")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/troubleshooting.md has no section for {missing:?}"
    );
}

#[test]
fn every_quoted_message_is_written_by_the_code() {
    let mut code = String::new();
    for entry in std::fs::read_dir(workspace().join("crates")).expect("crates/ is readable") {
        let src = entry.expect("a crate").path().join("src");
        if src.is_dir() {
            sources(&src, &mut code);
        }
    }
    let messages = quoted_messages(&page());
    assert!(
        messages.len() >= 20,
        "the page quotes {} messages; the parser lost them",
        messages.len()
    );
    let mut stale = Vec::new();
    for message in &messages {
        for part in literal_parts(message) {
            let part = part.trim();
            if part.len() >= 10 && !code.contains(part) {
                stale.push(format!("{part:?} (in {message:?})"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "docs/troubleshooting.md quotes text no source writes:\n{}",
        stale.join("\n")
    );
}

#[test]
fn a_placeholder_splits_a_message_and_a_comparison_does_not() {
    assert_eq!(
        literal_parts("Halt <canary> advancement rate <x>% < <min>%"),
        ["Halt ", " advancement rate ", "% < ", "%"]
    );
    assert_eq!(literal_parts("a ... b"), ["a ", " b"]);
}
