//! Elements numbered by an attribute (`<tb id>`, `<step s>`) must be numbered `0..n`,
//! each number once. Checked by sorting, so memory follows the number of elements in the
//! file, never the numbers written in it (`<tb id="65536">` costs one entry, not 65537).

/// The elements in number order, with what is wrong with the numbering.
pub(crate) struct Numbered<'e, T> {
    /// The first element (in file order) of each number, by increasing number.
    pub in_order: Vec<&'e T>,
    /// `(number, later, first)` for every element whose number an earlier one has.
    pub duplicates: Vec<(u64, &'e T, &'e T)>,
    /// `(missing, count)`: the smallest missing number and the highest number plus one.
    pub gap: Option<(u64, u64)>,
}

/// Sorts `(number, element)` pairs given in file order.
pub(crate) fn number<T>(mut items: Vec<(u64, &T)>) -> Numbered<'_, T> {
    // Stable: among equal numbers the first in the file stays first.
    items.sort_by_key(|&(n, _)| n);
    let mut out = Numbered {
        in_order: Vec::with_capacity(items.len()),
        duplicates: Vec::new(),
        gap: None,
    };
    let mut last: Option<(u64, &T)> = None;
    for (n, e) in items {
        match last {
            Some((m, first)) if m == n => out.duplicates.push((n, e, first)),
            _ => {
                let expected = out.in_order.len() as u64;
                if n != expected && out.gap.is_none() {
                    out.gap = Some((expected, 0));
                }
                out.in_order.push(e);
                last = Some((n, e));
            }
        }
    }
    if let (Some(gap), Some((max, _))) = (out.gap.as_mut(), last) {
        gap.1 = max + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_numbers_in_any_order() {
        let (a, b, c) = ("a", "b", "c");
        let n = number(vec![(2, &c), (0, &a), (1, &b)]);
        assert_eq!(n.in_order, vec![&a, &b, &c]);
        assert!(n.duplicates.is_empty());
        assert_eq!(n.gap, None);
    }

    #[test]
    fn duplicates_name_the_first_and_gaps_the_smallest_hole() {
        let (a, b, c, d) = ("a", "b", "c", "d");
        let n = number(vec![(0, &a), (3, &b), (0, &c), (1, &d)]);
        assert_eq!(n.in_order, vec![&a, &d, &b]);
        assert_eq!(n.duplicates, vec![(0, &c, &a)]);
        assert_eq!(n.gap, Some((2, 4)));
        // A huge number is one entry, not a huge table.
        let n = number(vec![(u64::from(u32::MAX), &a)]);
        assert_eq!(n.gap, Some((0, 1 << 32)));
    }
}
