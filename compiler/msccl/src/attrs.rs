//! Reading typed attributes off one element, collecting every problem instead of stopping
//! at the first (a file with three bad attributes gets three messages).

use crate::error::{shorten, XmlError};
use crate::parse::Elem;

pub(crate) struct Attrs<'a> {
    pub elem: &'a Elem,
    /// The element with its ancestors, as errors name it; only made for an error, so that
    /// reading a large valid file formats no labels.
    pub label: &'a dyn Fn() -> String,
    pub errors: &'a mut Vec<XmlError>,
}

impl<'a> Attrs<'a> {
    pub fn error(&mut self, message: impl Into<String>) {
        self.errors
            .push(XmlError::new(self.elem.pos, (self.label)(), message));
    }

    /// The attribute's text, or an error naming it when it is absent.
    pub fn text(&mut self, key: &str) -> Option<&'a str> {
        let v = self.elem.get(key);
        if v.is_none() {
            self.error(format!("missing required attribute `{key}`"));
        }
        v
    }

    /// An integer in `min..=max`, or an error naming the attribute and its value.
    pub fn int_in(&mut self, key: &str, min: i64, max: i64) -> Option<i64> {
        let raw = self.text(key)?;
        self.parse_int(key, raw, min, max)
    }

    /// Like [`Attrs::int_in`], but an absent attribute is `None` without an error.
    pub fn opt_int_in(&mut self, key: &str, min: i64, max: i64) -> Option<Option<i64>> {
        match self.elem.get(key) {
            None => Some(None),
            Some(raw) => self.parse_int(key, raw, min, max).map(Some),
        }
    }

    fn parse_int(&mut self, key: &str, raw: &str, min: i64, max: i64) -> Option<i64> {
        match raw.trim().parse::<i64>() {
            Err(_) => {
                self.error(format!(
                    "attribute {key}=\"{}\" is not an integer",
                    shorten(raw)
                ));
                None
            }
            Ok(v) if v < min || v > max => {
                self.error(format!(
                    "attribute {key}=\"{}\" is out of range (expected {min} to {max})",
                    shorten(raw)
                ));
                None
            }
            Ok(v) => Some(v),
        }
    }

    /// A `u32` attribute (non-negative).
    pub fn u32(&mut self, key: &str) -> Option<u32> {
        self.int_in(key, 0, i64::from(u32::MAX)).map(|v| v as u32)
    }

    /// A 0/1 flag.
    pub fn flag(&mut self, key: &str) -> Option<bool> {
        self.int_in(key, 0, 1).map(|v| v == 1)
    }
}
