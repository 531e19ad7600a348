//! The work budget of one instantiation, charged before the work is done.
//!
//! A *step* is one statement executed, one loop iteration started, one expression node
//! evaluated, one chunk written by an operation (later passes work per chunk), or one
//! chunk location declared by the headers (verification keeps a value per location).
//! Every block is charged, when it is entered, for the most its own statements can take
//! ([`block_cost`]: nested blocks are charged when they are entered in turn); a loop is
//! charged for all its iterations at once, before the first one runs. So a loop like
//! `for i in -2147483648 .. 1 { ... }` is refused at once, pointing at the loop, and
//! however loops nest, the steps taken never exceed the budget.
//!
//! An outermost loop is also refused at once when the loops nested in it whose bounds are
//! the same in every iteration ([`nested_work`]) would take too many steps: so
//! `for i in 0 .. 1 << 20 { for j in 0 .. 1 << 20 { ... } }` does not run until the
//! budget is spent.

use braid_ir::Shape;
use braid_lang::ast::{BufRef, ChunkSel, Expr, ExprKind, Stmt};
use std::collections::HashSet;

/// Steps one instantiation may take by default on up to 256 ranks (16,777,216). Every
/// shipped algorithm takes under a third of it on 256 ranks (the most, bidirectional ring
/// all-reduce, about 5 million; on 32 ranks, the most the tests use, about 77,000), and
/// spending all of it takes about a second in a release build.
pub const STEP_BUDGET: u64 = 1 << 24;

/// Steps allowed per pair of ranks, on more than 256 ranks. A collective's work grows with
/// N²: every shipped algorithm takes at most about 76 N² steps (bidirectional ring
/// all-reduce), so it keeps more than three times its need on any number of ranks.
pub const STEPS_PER_RANK_PAIR: u64 = 256;

/// The default budget never exceeds this (2^30, reached at 2048 ranks).
pub const MAX_DEFAULT_BUDGET: u64 = 1 << 30;

/// The default budget for `n` ranks: [`STEP_BUDGET`], or [`STEPS_PER_RANK_PAIR`] × n²
/// when that is larger, up to [`MAX_DEFAULT_BUDGET`].
pub fn default_budget(n: u32) -> u64 {
    let scaled = STEPS_PER_RANK_PAIR.saturating_mul(n as u64 * n as u64);
    STEP_BUDGET.max(scaled.min(MAX_DEFAULT_BUDGET))
}

/// The step budget in force for `shape`: `BRAID_MAX_STEPS` if set to a number, else
/// [`default_budget`].
pub fn step_budget(shape: &Shape) -> u64 {
    std::env::var("BRAID_MAX_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| default_budget(shape.n))
}

/// Steps taken so far against a limit.
#[derive(Clone, Debug)]
pub struct Budget {
    pub limit: u64,
    pub spent: u64,
}

impl Budget {
    pub fn new(limit: u64) -> Budget {
        Budget { limit, spent: 0 }
    }

    /// Whether `times` × `each` more steps fit in what is left.
    pub fn fits(&self, times: u64, each: u64) -> bool {
        times as u128 * each as u128 <= (self.limit - self.spent.min(self.limit)) as u128
    }

    /// Takes `times` × `each` steps if they fit in what is left; otherwise takes nothing
    /// and returns false.
    pub fn charge(&mut self, times: u64, each: u64) -> bool {
        if !self.fits(times, each) {
            return false;
        }
        self.spent += times * each;
        true
    }
}

/// Iterations of `for _ in lo .. hi step step` (`step > 0`).
pub fn iterations(lo: i64, hi: i64, step: i64) -> u64 {
    if hi > lo {
        ((hi as i128 - lo as i128 + step as i128 - 1) / step as i128) as u64
    } else {
        0
    }
}

/// A lower bound of the steps that the loops nested in `body` (the body of the loop
/// binding `var`) are charged on each run of `body`: the loops that run on every run (not
/// inside an `if`) and whose bounds use no name bound inside the loop, evaluated with
/// `eval` now. A bound that fails to evaluate counts for nothing (running reports it).
pub fn nested_work(var: &str, body: &[Stmt], eval: &mut impl FnMut(&Expr) -> Option<i64>) -> u64 {
    let mut inside = HashSet::from([var]);
    bound_names(body, &mut inside);
    work_of_loops(body, &inside, eval)
}

fn bound_names<'a>(stmts: &'a [Stmt], out: &mut HashSet<&'a str>) {
    for s in stmts {
        match s {
            Stmt::Let { name, .. } => {
                out.insert(&name.name);
            }
            Stmt::For { var, body, .. } => {
                out.insert(&var.name);
                bound_names(body, out);
            }
            Stmt::If {
                arms, otherwise, ..
            } => {
                arms.iter().for_each(|(_, b)| bound_names(b, out));
                otherwise.iter().for_each(|b| bound_names(b, out));
            }
            Stmt::Op(_) => {}
        }
    }
}

fn work_of_loops(
    stmts: &[Stmt],
    inside: &HashSet<&str>,
    eval: &mut impl FnMut(&Expr) -> Option<i64>,
) -> u64 {
    let mut total = 0u64;
    for s in stmts {
        let Stmt::For {
            lo, hi, step, body, ..
        } = s
        else {
            continue;
        };
        let invariant = |e: &Expr| {
            let mut uses_inner = false;
            e.visit_names(&mut |n, _| uses_inner |= inside.contains(n));
            !uses_inner
        };
        let exprs = [Some(lo), Some(hi), step.as_ref()];
        if !exprs.iter().flatten().all(|e| invariant(e)) {
            continue;
        }
        let (Some(lo), Some(hi)) = (eval(lo), eval(hi)) else {
            continue;
        };
        let step = match step {
            Some(e) => match eval(e) {
                Some(s) if s > 0 => s,
                _ => continue,
            },
            None => 1,
        };
        let count = iterations(lo, hi, step);
        if count == 0 {
            continue;
        }
        let each = (1 + block_cost(body)).saturating_add(work_of_loops(body, inside, eval));
        total = total.saturating_add(count.saturating_mul(each));
    }
    total
}

/// The most steps one run of `stmts` can take, not counting the blocks nested in them.
pub fn block_cost(stmts: &[Stmt]) -> u64 {
    stmts.iter().map(stmt_cost).fold(0, u64::saturating_add)
}

fn stmt_cost(stmt: &Stmt) -> u64 {
    let exprs: u64 = match stmt {
        Stmt::Let { value, .. } => expr_cost(value),
        Stmt::For { lo, hi, step, .. } => {
            expr_cost(lo) + expr_cost(hi) + step.as_ref().map_or(0, expr_cost)
        }
        Stmt::If { arms, .. } => arms.iter().map(|(c, _)| expr_cost(c)).sum(),
        Stmt::Op(op) => {
            std::iter::once(&op.dst)
                .chain(&op.srcs)
                .map(buf_ref_cost)
                .sum::<u64>()
                + op.channel.as_ref().map_or(0, expr_cost)
        }
    };
    1 + exprs
}

fn buf_ref_cost(r: &BufRef) -> u64 {
    expr_cost(&r.rank)
        + match &r.chunks {
            ChunkSel::One(e) => expr_cost(e),
            ChunkSel::Range(lo, hi) => expr_cost(lo) + expr_cost(hi),
        }
}

/// Nodes of an expression. Its depth is bounded by the parser (`braid_lang::limits`).
fn expr_cost(e: &Expr) -> u64 {
    1 + match &e.kind {
        ExprKind::Int(_) | ExprKind::Name(_) => 0,
        ExprKind::Unary(_, a) => expr_cost(a),
        ExprKind::Binary(_, a, b) => expr_cost(a) + expr_cost(b),
        ExprKind::Call(_, args) => args.iter().map(expr_cost).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_body(text: &str) -> Vec<Stmt> {
        let src = format!("algorithm a : allreduce {{ {text} }}");
        let (file, diags) = braid_lang::parse_and_check(&src);
        assert!(diags.is_empty(), "{diags:?}");
        file.algorithms[0].body.clone()
    }

    #[test]
    fn a_block_costs_its_statements_and_expression_nodes() {
        assert_eq!(block_cost(&parse_body("let x = 1 + 2;")), 1 + 3);
        // The loop's bounds, not its body.
        assert_eq!(
            block_cost(&parse_body("for i in 0 .. N { let x = -i; }")),
            1 + 2
        );
        assert_eq!(
            block_cost(&parse_body(
                "reduce out[0][1] <- out[1][0], in[2][3] @ch(min(1, 2));"
            )),
            1 + 6 + 3
        );
    }

    #[test]
    fn nested_loops_with_fixed_bounds_are_counted_ahead() {
        let b = parse_body(
            "let m = 10; for i in 0 .. 2 { for j in 0 .. m { for k in 0 .. 3 { let x = 1; } }
             for j in 0 .. i { let y = 1; } if 1 { for j in 0 .. 5 { } } let m = 1; }",
        );
        let Stmt::For { var, body, .. } = &b[1] else {
            panic!()
        };
        let m = |e: &Expr| match &e.kind {
            ExprKind::Int(v) => Some(*v),
            ExprKind::Name(n) if n == "m" => Some(10),
            _ => None,
        };
        // `m` is bound again inside the loop, so `for j in 0 .. m` may change: nothing.
        assert_eq!(nested_work(&var.name, body, &mut { m }), 0);
        let b = parse_body(
            "for i in 0 .. 2 { for j in 0 .. 10 { for k in 0 .. 3 { let x = 1; } }
                         for j in 0 .. i { let y = 1; } if 1 { for j in 0 .. 5 { } } }",
        );
        let Stmt::For { var, body, .. } = &b[0] else {
            panic!()
        };
        // j: 10 × (1 + k's header 3 + k: 3 × (1 + 2)); the others may not run or vary.
        assert_eq!(
            nested_work(&var.name, body, &mut { m }),
            10 * (1 + 3 + 3 * 3)
        );
    }

    #[test]
    fn the_default_budget_grows_with_the_square_of_the_ranks_past_256() {
        assert_eq!(default_budget(1), STEP_BUDGET);
        assert_eq!(default_budget(256), STEP_BUDGET);
        assert_eq!(default_budget(512), 1 << 26);
        assert_eq!(default_budget(1024), 1 << 28);
        assert_eq!(default_budget(4096), MAX_DEFAULT_BUDGET);
        assert_eq!(default_budget(u32::MAX), MAX_DEFAULT_BUDGET);
    }

    #[test]
    fn charges_are_all_or_nothing() {
        let mut b = Budget::new(10);
        assert!(b.charge(3, 3));
        assert!(!b.charge(1, 2));
        assert_eq!(b.spent, 9);
        assert!(b.charge(1, 1));
        assert!(!b.charge(u64::MAX, u64::MAX));
        assert_eq!(b.spent, 10);
    }
}
