//! The input as the converters read it: YAML documents split from a file (with what became of each
//! and what goes to the output), the API groups they belong to, and lookups of their kind and name.

use serde_json::Value;

pub(super) const SERIN_API_VERSION: &str = "serin.dev/v1beta1";
pub(super) const FLAGGER_GROUP: &str = "flagger.app";
pub(super) const ARGO_GROUP: &str = "argoproj.io";
pub(super) const ISTIO_GROUP: &str = "networking.istio.io";

/// The analysis interval of a converted Rollout when its metrics name none: Flagger's default.
pub(super) const DEFAULT_INTERVAL: &str = "1m";

/// One YAML document of an input file, as written and as parsed.
pub(super) struct Document {
    pub(super) file: usize,
    pub(super) text: String,
    pub(super) value: Value,
}

/// What became of one input document.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Outcome {
    /// Printed as written.
    PassedThrough,
    /// Printed as written but for its apiVersion line.
    Rewritten,
    /// Printed as new objects built from its fields (its comments are lost).
    Converted,
    /// Not printed.
    LeftOut,
}

/// What goes to stdout for one input document.
pub(super) enum Emitted {
    /// Text as written (with comments), possibly with its apiVersion line rewritten.
    Text(String),
    /// A converted object, serialized on output.
    Object(Value),
}

/// Splits a file at its `---` lines. A document holding only comments is kept with the next one,
/// so a file's header comment stays with the first object.
pub(super) fn split_documents(text: &str) -> Vec<String> {
    let mut documents = Vec::new();
    let mut current = String::new();
    let mut finish = |current: &mut String| {
        let meaningful = current.lines().any(|line| {
            let line = line.trim();
            !line.is_empty() && !line.starts_with('#')
        });
        if meaningful {
            documents.push(std::mem::take(current));
        }
    };
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end();
        if bare == "---" || bare.starts_with("--- ") || bare == "..." {
            finish(&mut current);
            if let Some(rest) = bare.strip_prefix("--- ")
                && !rest.trim_start().starts_with('#')
            {
                current.push_str(rest);
                current.push('\n');
            }
            continue;
        }
        current.push_str(line);
    }
    finish(&mut current);
    documents
}

/// Whether a document has a comment: a `#` at the start of a line or after a space, outside quotes
/// and outside block scalars (where `#` is text, e.g. in a shell command or a query).
pub(super) fn has_comments(text: &str) -> bool {
    let mut block_indent: Option<usize> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(block) = block_indent {
            if line.trim().is_empty() || indent > block {
                continue;
            }
            block_indent = None;
        }
        let (content, comment) = split_comment(line);
        if comment {
            return true;
        }
        let content = content.trim_end();
        if ["|", "|-", "|+", ">", ">-", ">+"]
            .iter()
            .any(|indicator| content.ends_with(indicator) && content.len() > indicator.len())
        {
            block_indent = Some(indent);
        }
    }
    false
}

/// The part of a line before its comment, and whether there was a comment.
fn split_comment(line: &str) -> (&str, bool) {
    let mut quote: Option<char> = None;
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            // A quote opens a quoted scalar only where one can start, not in `it's`.
            None if (c == '"' || c == '\'')
                && (previous.is_whitespace() || ":[{,-".contains(previous)) =>
            {
                quote = Some(c)
            }
            None if c == '#' && previous.is_whitespace() => return (&line[..at], true),
            None => {}
        }
        previous = c;
    }
    (line, false)
}

pub(super) fn same_namespace(a: Option<&str>, b: Option<&str>) -> bool {
    a.is_none() || b.is_none() || a == b
}

pub(super) fn api_group(value: &Value) -> &str {
    value["apiVersion"]
        .as_str()
        .and_then(|version| version.rsplit_once('/'))
        .map_or("", |(group, _)| group)
}

pub(super) fn is_kind(value: &Value, group: &str, kind: &str) -> bool {
    api_group(value) == group && value["kind"] == kind
}

pub(super) fn name_of(value: &Value) -> &str {
    value["metadata"]["name"].as_str().unwrap_or_default()
}

pub(super) fn namespace_of(value: &Value) -> Option<&str> {
    value["metadata"]["namespace"].as_str()
}

pub(super) fn describe(value: &Value) -> String {
    let kind = value["kind"].as_str().unwrap_or("object");
    match value["metadata"]["name"].as_str() {
        Some(name) => format!("{kind} {name}"),
        None => kind.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_split_at_separator_lines_with_header_comments_kept() {
        let documents = split_documents(
            "# header\n---\na: 1\n--- # second\nb: 2\n---\n# only a comment\n...\nc: |\n  ---x\n",
        );
        assert_eq!(
            documents,
            [
                "# header\na: 1\n",
                "b: 2\n",
                "# only a comment\nc: |\n  ---x\n"
            ]
        );
    }

    #[test]
    fn comments_are_told_from_hashes_in_strings_and_block_scalars() {
        assert!(has_comments("a: 1 # why\n"));
        assert!(has_comments("  # why\na: 1\n"));
        assert!(!has_comments("a: \"x # y\"\nb: 'z #'\nc: d#e\n"));
        assert!(has_comments("a: it's # yours\n"));
        assert!(!has_comments(
            "cmd: |\n  echo 1 # shell comment\n  # another\nnext: 2\n"
        ));
        assert!(has_comments("cmd: |\n  echo 1\n# after the block\n"));
    }
}
