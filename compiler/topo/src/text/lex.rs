//! Splitting one line of a topology file into tokens with their columns.

/// A token: a bare word, or `key=value`. Columns are 1-based, in characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Token {
    Word {
        text: String,
        col: usize,
    },
    Pair {
        key: String,
        key_col: usize,
        value: String,
        value_col: usize,
    },
}

impl Token {
    pub(super) fn col(&self) -> usize {
        match self {
            Token::Word { col, .. } => *col,
            Token::Pair { key_col, .. } => *key_col,
        }
    }
}

/// A lexing error: column and message.
pub(super) type LexError = (usize, String);

/// The tokens of `line`, up to a `#` that starts a token (a comment).
pub(super) fn tokens(line: &str) -> Result<Vec<Token>, LexError> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        if i == chars.len() || chars[i] == '#' {
            return Ok(out);
        }
        let start = i;
        while i < chars.len() && !chars[i].is_whitespace() && chars[i] != '=' {
            if chars[i] == '"' {
                return Err((i + 1, "a quoted value must follow `key=`".into()));
            }
            i += 1;
        }
        let text: String = chars[start..i].iter().collect();
        if i < chars.len() && chars[i] == '=' {
            if text.is_empty() {
                return Err((start + 1, "`=` without a key before it".into()));
            }
            i += 1;
            let value_col = i + 1;
            let value = if i < chars.len() && chars[i] == '"' {
                quoted(&chars, &mut i)?
            } else {
                let v = i;
                while i < chars.len() && !chars[i].is_whitespace() {
                    if chars[i] == '"' {
                        return Err((
                            i + 1,
                            "a quote inside a bare value: quote the whole value".into(),
                        ));
                    }
                    i += 1;
                }
                chars[v..i].iter().collect()
            };
            if i < chars.len() && !chars[i].is_whitespace() {
                return Err((i + 1, "expected a space after the closing quote".into()));
            }
            out.push(Token::Pair {
                key: text,
                key_col: start + 1,
                value,
                value_col,
            });
        } else {
            out.push(Token::Word {
                text,
                col: start + 1,
            });
        }
    }
}

/// The quoted string starting at `chars[*i] == '"'`; leaves `*i` after the closing quote.
fn quoted(chars: &[char], i: &mut usize) -> Result<String, LexError> {
    let open = *i;
    *i += 1;
    let mut out = String::new();
    while *i < chars.len() {
        match chars[*i] {
            '"' => {
                *i += 1;
                return Ok(out);
            }
            '\\' => {
                let escaped = chars.get(*i + 1).copied();
                out.push(match escaped {
                    Some('"') => '"',
                    Some('\\') => '\\',
                    Some('n') => '\n',
                    Some('t') => '\t',
                    _ => return Err((*i + 1, "unknown escape: use \\\", \\\\, \\n or \\t".into())),
                });
                *i += 2;
            }
            c => {
                out.push(c);
                *i += 1;
            }
        }
    }
    Err((open + 1, "unterminated quoted value".into()))
}
