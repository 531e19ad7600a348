//! The names bound by `let` and `for` at one point of an instantiation.
//!
//! A stack, innermost last. Lookups and the loop variables an operation records take
//! constant time however many names are bound, so that a file of 100,000 `let`s is not
//! quadratic: once many names are bound, each name's positions are indexed.

use std::collections::HashMap;
use std::sync::Arc;

/// A name bound by `let` or `for`.
#[derive(Clone, Debug)]
pub struct Bound {
    pub name: Arc<str>,
    pub value: i64,
    pub is_loop: bool,
}

/// Bindings from which on lookups go through the index; below half of it, the index is
/// dropped (a short scan is cheaper than hashing).
const INDEX_FROM: usize = 32;
/// `let` bindings a diagnostic's note shows, besides every loop variable.
const LETS_SHOWN: usize = 10;

#[derive(Clone, Debug, Default)]
pub struct Bindings {
    all: Vec<Bound>,
    /// Positions of loop variables in `all`.
    loops: Vec<usize>,
    /// Each name's positions in `all`, innermost last, once `all` is long.
    index: Option<HashMap<Arc<str>, Vec<usize>>>,
}

impl Bindings {
    pub fn len(&self) -> usize {
        self.all.len()
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    pub fn push(&mut self, b: Bound) {
        let at = self.all.len();
        if b.is_loop {
            self.loops.push(at);
        }
        if let Some(index) = &mut self.index {
            index.entry(b.name.clone()).or_default().push(at);
        }
        self.all.push(b);
        if self.index.is_none() && self.all.len() > INDEX_FROM {
            let mut index: HashMap<Arc<str>, Vec<usize>> = HashMap::new();
            for (i, b) in self.all.iter().enumerate() {
                index.entry(b.name.clone()).or_default().push(i);
            }
            self.index = Some(index);
        }
    }

    pub fn pop(&mut self) {
        let Some(b) = self.all.pop() else { return };
        if b.is_loop {
            self.loops.pop();
        }
        if let Some(index) = &mut self.index {
            if let Some(at) = index.get_mut(&b.name) {
                at.pop();
                if at.is_empty() {
                    index.remove(&b.name);
                }
            }
            if self.all.len() <= INDEX_FROM / 2 {
                self.index = None;
            }
        }
    }

    pub fn truncate(&mut self, len: usize) {
        while self.all.len() > len {
            self.pop();
        }
    }

    /// The innermost value bound to `name`.
    pub fn get(&self, name: &str) -> Option<i64> {
        match &self.index {
            Some(index) => index
                .get(name)
                .and_then(|at| at.last())
                .map(|&i| self.all[i].value),
            None => self
                .all
                .iter()
                .rev()
                .find(|b| &*b.name == name)
                .map(|b| b.value),
        }
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Bound> {
        self.all.iter()
    }

    /// The loop variables, outermost first.
    pub fn loops(&self) -> impl Iterator<Item = &Bound> {
        self.loops.iter().map(|&i| &self.all[i])
    }

    pub fn in_loop(&self) -> bool {
        !self.loops.is_empty()
    }

    /// What a diagnostic shows: every loop variable (loops nest a bounded number deep)
    /// and the innermost few `let`s, in binding order; and how many `let`s are left out.
    pub fn shown(&self) -> (Vec<&Bound>, usize) {
        let mut lets = 0;
        let mut shown_at = Vec::new();
        for (i, b) in self.all.iter().enumerate().rev() {
            if b.is_loop {
                continue;
            }
            if lets == LETS_SHOWN {
                break;
            }
            lets += 1;
            shown_at.push(i);
        }
        let all_lets = self.all.len() - self.loops.len();
        shown_at.extend(&self.loops);
        shown_at.sort_unstable();
        (
            shown_at.into_iter().map(|i| &self.all[i]).collect(),
            all_lets - lets,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(name: &str, value: i64, is_loop: bool) -> Bound {
        Bound {
            name: name.into(),
            value,
            is_loop,
        }
    }

    #[test]
    fn innermost_binding_wins_with_and_without_the_index() {
        let mut b = Bindings::default();
        b.push(bound("i", 0, true));
        b.push(bound("x", 1, false));
        for k in 0..100 {
            b.push(bound(&format!("y{k}"), k, false));
            assert_eq!(b.get("x"), Some(1));
        }
        b.push(bound("x", 2, false));
        assert!(b.index.is_some());
        assert_eq!(b.get("x"), Some(2));
        assert_eq!(b.get("y7"), Some(7));
        b.truncate(2);
        assert!(b.index.is_none());
        assert_eq!(b.get("x"), Some(1));
        assert_eq!(b.get("y7"), None);
        assert_eq!(b.loops().map(|b| b.value).collect::<Vec<_>>(), vec![0]);
        b.pop();
        b.pop();
        assert!(!b.in_loop() && b.is_empty());
    }

    #[test]
    fn diagnostics_show_loops_and_the_innermost_lets() {
        let mut b = Bindings::default();
        b.push(bound("r", 3, true));
        for k in 0..20 {
            b.push(bound(&format!("x{k}"), k, false));
        }
        b.push(bound("s", 4, true));
        let (shown, left_out) = b.shown();
        let names: Vec<&str> = shown.iter().map(|b| &*b.name).collect();
        assert_eq!(names.len(), 2 + LETS_SHOWN);
        assert_eq!(
            (names[0], names[1], names[names.len() - 1]),
            ("r", "x10", "s")
        );
        assert_eq!(left_out, 10);
    }
}
