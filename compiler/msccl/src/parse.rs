//! The streaming pass: quick-xml events to a small tree of the four elements MSCCL
//! runtimes read (`algo` > `gpu` > `tb` > `step`), each with its attributes and position.
//!
//! Production files are over half a megabyte, so no DOM is built: only these four
//! elements are kept, and everything else (TACCL's `<copy>`, comments, processing
//! instructions, text) is skipped as the runtimes skip it.

use crate::error::{shorten, Lines, Pos, XmlError};
use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, XmlVersion};

/// One element the importer reads: where it starts and its attributes in file order.
/// Keys and values share one string (a large file has hundreds of thousands of elements).
#[derive(Debug)]
pub(crate) struct Elem {
    pub pos: Pos,
    text: String,
    /// Per attribute: where its key ends and its value ends in `text` (each starts where
    /// the one before ends).
    ends: Vec<(u32, u32)>,
}

impl Elem {
    pub fn get(&self, name: &str) -> Option<&str> {
        let mut start = 0;
        for &(k, v) in &self.ends {
            let (k, v) = (k as usize, v as usize);
            if &self.text[start..k] == name {
                return Some(&self.text[k..v]);
            }
            start = v;
        }
        None
    }
}

#[derive(Debug)]
pub(crate) struct RawTb {
    pub elem: Elem,
    pub steps: Vec<Elem>,
}

#[derive(Debug)]
pub(crate) struct RawGpu {
    pub elem: Elem,
    pub tbs: Vec<RawTb>,
}

#[derive(Debug)]
pub(crate) struct RawAlgo {
    pub elem: Elem,
    pub gpus: Vec<RawGpu>,
}

/// `<gpu id="2">` style label from an element's identifying attribute, kept verbatim
/// (up to a length) so the message shows what the file says even when the value is not a
/// number.
pub(crate) fn label(tag: &str, key: &str, e: &Elem) -> String {
    match e.get(key) {
        Some(v) => format!("<{tag} {key}=\"{}\">", shorten(v)),
        None => format!("<{tag}>"),
    }
}

/// Which of the four kept elements is open, innermost last.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Algo,
    Gpu,
    Tb,
    Step,
    /// Anything else, skipped with its whole subtree.
    Other,
}

/// Attributes read per element. MSCCL's elements have at most a dozen; the cap also bounds
/// quick-xml's duplicate-attribute check, which compares each attribute with all before it.
pub(crate) const MAX_ATTRIBUTES: usize = 64;

fn elem(e: &BytesStart, pos: Pos) -> Result<Elem, XmlError> {
    let tag = e.name().into_inner().to_string();
    let mut out = Elem {
        pos,
        text: String::new(),
        ends: Vec::new(),
    };
    for a in e.attributes() {
        if out.ends.len() == MAX_ATTRIBUTES {
            return Err(XmlError::new(
                pos,
                format!("<{tag}>"),
                format!("more than {MAX_ATTRIBUTES} attributes; MSCCL elements have about a dozen"),
            ));
        }
        let a = a.map_err(|err| {
            XmlError::new(pos, format!("<{tag}>"), format!("bad attribute: {err}"))
        })?;
        let key = a.key.into_inner();
        let value = a.normalized_value(XmlVersion::Implicit1_0).map_err(|err| {
            XmlError::new(
                pos,
                format!("<{tag}>"),
                format!("bad value of {}: {err}", shorten(key)),
            )
        })?;
        // Element text is a slice of the file, so much shorter than 4 GiB.
        out.text.push_str(key);
        let k = out.text.len() as u32;
        out.text.push_str(&value);
        out.ends.push((k, out.text.len() as u32));
    }
    Ok(out)
}

/// How errors name an open element of kind `open`: the innermost one of that kind, which
/// is the last one read. `None` for skipped elements.
fn open_label(algo: Option<&RawAlgo>, open: Open) -> Option<String> {
    let gpu = || algo?.gpus.last();
    let tb = || gpu()?.tbs.last();
    match open {
        Open::Algo => Some("<algo>".to_string()),
        Open::Gpu => gpu().map(|g| label("gpu", "id", &g.elem)),
        Open::Tb => Some(format!(
            "{} of {}",
            label("tb", "id", &tb()?.elem),
            label("gpu", "id", &gpu()?.elem)
        )),
        Open::Step => tb()?.steps.last().map(|e| label("step", "s", e)),
        Open::Other => None,
    }
}

/// Reads the whole file. Syntax errors stop the pass (nothing after them can be trusted);
/// misplaced elements are collected and reported together.
pub(crate) fn parse(text: &str, lines: &Lines) -> Result<RawAlgo, Vec<XmlError>> {
    let mut reader = Reader::from_str(text);
    let mut algo: Option<RawAlgo> = None;
    // Open elements with where they start; their labels are made only for an error.
    let mut stack: Vec<(Open, Pos)> = Vec::new();
    let mut errors = Vec::new();
    loop {
        let before = reader.buffer_position();
        let ev = match reader.read_event() {
            Ok(ev) => ev,
            Err(e) => {
                let at = lines.pos(reader.error_position());
                let inside = stack
                    .iter()
                    .rev()
                    .find_map(|&(o, _)| open_label(algo.as_ref(), o))
                    .unwrap_or_else(|| "the file".to_string());
                errors.push(XmlError::new(at, inside, format!("malformed XML: {e}")));
                return Err(errors);
            }
        };
        let (e, empty) = match ev {
            Event::Start(e) => (e, false),
            Event::Empty(e) => (e, true),
            Event::End(_) => {
                stack.pop();
                continue;
            }
            Event::Eof => break,
            _ => continue,
        };
        let pos = lines.pos(before);
        let qname = e.name();
        let name: &str = qname.into_inner();
        let parent = stack.last().map(|&(o, _)| o);
        let kind = match (name, parent) {
            (_, Some(Open::Other | Open::Step)) => Open::Other,
            ("algo", None) => Open::Algo,
            ("gpu", Some(Open::Algo)) => Open::Gpu,
            ("tb", Some(Open::Gpu)) => Open::Tb,
            ("step", Some(Open::Tb)) => Open::Step,
            ("algo" | "gpu" | "tb" | "step", _) => {
                let tag = name.to_string();
                let want = match tag.as_str() {
                    "algo" => "at the top level",
                    "gpu" => "inside <algo>",
                    "tb" => "inside <gpu>",
                    _ => "inside <tb>",
                };
                errors.push(XmlError::new(
                    pos,
                    format!("<{tag}>"),
                    format!("misplaced element: <{tag}> belongs {want}"),
                ));
                Open::Other
            }
            _ => Open::Other,
        };
        if kind != Open::Other {
            let elem = elem(&e, pos).map_err(|x| vec![x])?;
            match kind {
                Open::Algo if algo.is_some() => {
                    errors.push(XmlError::new(
                        pos,
                        "<algo>",
                        "a second <algo>; a file holds exactly one algorithm",
                    ));
                }
                Open::Algo => {
                    algo = Some(RawAlgo {
                        elem,
                        gpus: Vec::new(),
                    });
                }
                Open::Gpu => {
                    let a = algo.as_mut().expect("parent is algo");
                    a.gpus.push(RawGpu {
                        elem,
                        tbs: Vec::new(),
                    });
                }
                Open::Tb => {
                    let a = algo.as_mut().expect("parent is algo");
                    let g = a.gpus.last_mut().expect("parent is gpu");
                    g.tbs.push(RawTb {
                        elem,
                        steps: Vec::new(),
                    });
                }
                Open::Step => {
                    let a = algo.as_mut().expect("parent is algo");
                    let g = a.gpus.last_mut().expect("parent is gpu");
                    let t = g.tbs.last_mut().expect("parent is tb");
                    t.steps.push(elem);
                }
                Open::Other => {}
            }
        }
        if !empty {
            stack.push((kind, pos));
        }
    }
    if let Some((_, pos)) = stack.first() {
        let open: Vec<String> = stack
            .iter()
            .filter_map(|&(o, p)| {
                Some(format!(
                    "{} (line {})",
                    open_label(algo.as_ref(), o)?,
                    p.line
                ))
            })
            .collect();
        errors.push(XmlError::new(
            lines.pos(text.len() as u64),
            "the file",
            format!(
                "the file ends before closing {}; is it truncated? (outermost open element at line {})",
                if open.is_empty() { "every element".to_string() } else { open.join(", ") },
                pos.line
            ),
        ));
    }
    let Some(algo) = algo else {
        errors.push(XmlError::new(
            lines.pos(0),
            "the file",
            if text.trim().is_empty() {
                "the file is empty; an MSCCL algorithm is one <algo> element"
            } else {
                "no <algo> element; an MSCCL algorithm is one <algo> element"
            },
        ));
        return Err(errors);
    };
    if errors.is_empty() {
        Ok(algo)
    } else {
        Err(errors)
    }
}
