//! Phase f: executed symbolically, the plan computes the collective.
//!
//! Every location holds a [`Value`] (a multiset of input contributions). Steps run one at
//! a time in the deadlock simulation's completion order, which respects happens-before;
//! since the race phase has shown that every two conflicting accesses are ordered, any
//! such order gives the same result as the real, parallel run. Messages carry values
//! from a sending step to its receiving step.
//!
//! Reading a location nothing has written is an error; its result is "poisoned" so that
//! what it feeds is not reported again. At the end every `out` location must satisfy the
//! collective's postcondition. Modes are checked in order (out-of-place first) and
//! checking stops at the first mode that fails, since its errors usually repeat in the next.

use super::connections::Wiring;
use super::index::NONE;
use super::Ctx;
use crate::diag::{Check, PlanDiagnostic, Site};
use crate::plan::{Slice, StepKind};
use braid_ir::value::{postcondition, RankSet, Value};
use braid_ir::{Buf, Layout, Mode};

/// Problems of each kind reported per mode before the rest are only counted.
const MAX_REPORTED: usize = 10;

/// `None` is a poisoned value: it derives from an undefined read already reported.
type Sym = Option<Value>;

struct Machine<'c, 'p> {
    cx: &'c Ctx<'p>,
    mode: Mode,
    layout: &'c Layout,
    val: Vec<Value>,
    poisoned: Vec<bool>,
    writer: Vec<u32>,
    payload: Vec<Option<Vec<Sym>>>,
    undefined_reads: usize,
    out: Vec<PlanDiagnostic>,
}

impl Machine<'_, '_> {
    fn loc(&self, rank: u32, buf: Buf, chunk: u32) -> usize {
        self.layout
            .loc(buf, rank, chunk)
            .expect("bounds phase passed")
            .index()
    }

    fn read(&mut self, x: u32, rank: u32, s: &Slice) -> Vec<Sym> {
        let mut reported = false;
        (0..s.count)
            .map(|i| {
                let loc = self.loc(rank, s.buf, s.offset + i);
                let v = &self.val[loc];
                if v.is_defined() {
                    return Some(v.clone());
                }
                if !self.poisoned[loc] && !reported {
                    reported = true;
                    self.undefined_reads += 1;
                    if self.undefined_reads <= MAX_REPORTED {
                        let d = self.cx.ix.at(
                            Check::Postcondition,
                            x,
                            format!(
                                "reads {}[{}] of rank {rank} in mode {}, which nothing has written yet",
                                s.buf,
                                s.offset + i,
                                self.mode.name()
                            ),
                        )
                        .note("out and scratch start undefined; only in an in-place call do the out chunks that alias in start with the input");
                        self.out.push(d);
                    }
                }
                None
            })
            .collect()
    }

    fn write(&mut self, x: u32, rank: u32, s: &Slice, vals: Vec<Sym>) {
        for (i, v) in vals.into_iter().enumerate() {
            let loc = self.loc(rank, s.buf, s.offset + i as u32);
            self.poisoned[loc] = v.is_none();
            self.val[loc] = v.unwrap_or(Value::Undef);
            self.writer[loc] = x;
        }
    }

    fn received(&mut self, w: &Wiring, x: u32) -> Vec<Sym> {
        let sender = w.sender_of[x as usize];
        self.payload[sender as usize]
            .take()
            .expect("the sender ran before its receiver")
    }

    fn step(&mut self, w: &Wiring, x: u32) {
        let step = self.cx.ix.step(x);
        let rank = self.cx.ix.id(x).rank;
        let (src, dst) = (step.src, step.dst);
        let combine = |a: Vec<Sym>, b: Vec<Sym>| -> Vec<Sym> {
            a.into_iter()
                .zip(b)
                .map(|(a, b)| Some(Value::reduce(&a?, &b?)))
                .collect()
        };
        let sent = match step.kind {
            StepKind::Send => Some(self.read(x, rank, &src.expect("s has src"))),
            StepKind::Recv => {
                let v = self.received(w, x);
                self.write(x, rank, &dst.expect("r has dst"), v);
                None
            }
            StepKind::RecvCopySend => {
                let v = self.received(w, x);
                self.write(x, rank, &dst.expect("rcs has dst"), v.clone());
                Some(v)
            }
            StepKind::RecvReduceSend => {
                let v = self.received(w, x);
                let s = self.read(x, rank, &src.expect("rrs has src"));
                Some(combine(s, v))
            }
            StepKind::RecvReduceCopy | StepKind::RecvReduceCopySend => {
                let v = self.received(w, x);
                let s = self.read(x, rank, &src.expect("rrc has src"));
                let r = combine(s, v);
                self.write(x, rank, &dst.expect("rrc has dst"), r.clone());
                (step.kind == StepKind::RecvReduceCopySend).then_some(r)
            }
            StepKind::Copy => {
                let (s, d) = (src.expect("cpy has src"), dst.expect("cpy has dst"));
                let same = self.loc(rank, s.buf, s.offset) == self.loc(rank, d.buf, d.offset);
                if !same {
                    let v = self.read(x, rank, &s);
                    self.write(x, rank, &d, v);
                }
                None
            }
            StepKind::Reduce => {
                let (s, d) = (src.expect("re has src"), dst.expect("re has dst"));
                let a = self.read(x, rank, &d);
                let b = self.read(x, rank, &s);
                self.write(x, rank, &d, combine(a, b));
                None
            }
            StepKind::Nop => None,
        };
        if let Some(v) = sent {
            self.payload[x as usize] = Some(v);
        }
    }

    /// Compare every `out` location with the postcondition.
    fn check_outputs(&mut self) {
        let n = self.layout.n;
        let all = RankSet::all(n);
        let mut wrong = 0usize;
        let post: Vec<_> = postcondition(self.layout).collect();
        for (r, c, expected) in post {
            let loc = self.loc(r, Buf::Out, c);
            let v = &self.val[loc];
            if self.poisoned[loc] || expected.holds(v, &all) {
                continue;
            }
            wrong += 1;
            if wrong > MAX_REPORTED {
                continue;
            }
            let ix = &self.cx.ix;
            let mode = self.mode.name();
            let should = expected.describe(n);
            let w = self.writer[loc];
            let d = if w != NONE {
                ix.at(
                    Check::Postcondition,
                    w,
                    format!(
                        "after the plan, out[{c}] of rank {r} holds {v}, but should hold {should} (mode {mode})"
                    ),
                )
                .note("this step is the last to write it")
            } else {
                let what = if v.is_defined() {
                    format!("still holds its initial value {v}")
                } else {
                    "was never written".to_string()
                };
                PlanDiagnostic::new(
                    Check::Postcondition,
                    Site::Rank(r),
                    format!(
                        "after the plan, out[{c}] of rank {r} {what}, but should hold {should} (mode {mode})"
                    ),
                )
                .note("no step writes it")
            };
            self.out.push(d);
        }
        if wrong > MAX_REPORTED {
            self.out.push(PlanDiagnostic::new(
                Check::Postcondition,
                Site::Plan,
                format!(
                    "{} more wrong out location(s) in mode {} not shown",
                    wrong - MAX_REPORTED,
                    self.mode.name()
                ),
            ));
        }
        if self.undefined_reads > MAX_REPORTED {
            self.out.push(PlanDiagnostic::new(
                Check::Postcondition,
                Site::Plan,
                format!(
                    "{} more step(s) reading undefined chunks in mode {} not shown",
                    self.undefined_reads - MAX_REPORTED,
                    self.mode.name()
                ),
            ));
        }
    }
}

pub(crate) fn check(cx: &Ctx, w: &Wiring, order: &[u32]) -> Vec<PlanDiagnostic> {
    for (mode, layout) in &cx.layouts {
        let nl = layout.num_locs();
        let mut m = Machine {
            cx,
            mode: *mode,
            layout,
            val: vec![Value::Undef; nl],
            poisoned: vec![false; nl],
            writer: vec![NONE; nl],
            payload: vec![None; cx.ix.n_steps()],
            undefined_reads: 0,
            out: Vec::new(),
        };
        for (loc, rank, chunk) in layout.initial_inputs() {
            m.val[loc.index()] = Value::Input { rank, chunk };
        }
        for &x in order {
            m.step(w, x);
        }
        m.check_outputs();
        if !m.out.is_empty() {
            return m.out;
        }
    }
    Vec::new()
}
