//! Phase c: on every connection, the sender's messages and the receiver's receives agree
//! one for one, in order and in size.
//!
//! MSCCL's runtime pairs the k-th send with the k-th receive blindly; a count mismatch
//! corrupts data or hangs at run time, so it is an error here, reported at the first
//! message where the two sides disagree.

use super::index::NONE;
use super::Ctx;
use crate::diag::{Check, PlanDiagnostic};
use crate::wiring::{links, Link};

/// The pairing of sends and receives, valid once this phase reports nothing.
pub(crate) struct Wiring {
    /// Connections with both ends present.
    pub connections: usize,
    /// Messages over all connections.
    pub messages: usize,
    /// For each global step that sends, the global step receiving its message.
    pub receiver_of: Vec<u32>,
    /// For each global step that receives, the global step that sent the message.
    pub sender_of: Vec<u32>,
    /// Per global block: the connection its sends go on, or [`NONE`].
    pub out_conn: Vec<u32>,
    /// Per global block: the connection its receives come from, or [`NONE`].
    pub in_conn: Vec<u32>,
    /// Per connection: (sending global block, receiving global block, channel).
    pub conn_ends: Vec<(u32, u32, u32)>,
}

fn arrow(l: &Link) -> String {
    format!(
        "connection {} -> {} (channel {})",
        l.sender_rank, l.receiver_rank, l.channel
    )
}

pub(crate) fn check(cx: &Ctx) -> (Wiring, Vec<PlanDiagnostic>) {
    let ix = &cx.ix;
    let mut w = Wiring {
        connections: 0,
        messages: 0,
        receiver_of: vec![NONE; ix.n_steps()],
        sender_of: vec![NONE; ix.n_steps()],
        out_conn: vec![NONE; ix.n_blocks()],
        in_conn: vec![NONE; ix.n_blocks()],
        conn_ends: Vec::new(),
    };
    let mut out = Vec::new();
    // After the structure phase, rank positions are ranks and block positions are ids.
    let gid = |end: (usize, usize), step: usize| ix.gid(end.0 as u32, end.1 as u32, step as u32);
    for l in links(ix.plan) {
        match (l.sender, l.receiver) {
            (Some(s), None) => {
                if let Some(&first) = l.sends.first() {
                    out.push(ix.at(
                        Check::Connection,
                        gid(s, first),
                        format!(
                            "sends to rank {} on channel {}, but no block of rank {} has recv_peer = {} on channel {}",
                            l.receiver_rank, l.channel, l.receiver_rank, l.sender_rank, l.channel
                        ),
                    ));
                }
            }
            (None, Some(r)) => {
                if let Some(&first) = l.recvs.first() {
                    out.push(ix.at(
                        Check::Connection,
                        gid(r, first),
                        format!(
                            "receives from rank {} on channel {}, but no block of rank {} has send_peer = {} on channel {}",
                            l.sender_rank, l.channel, l.sender_rank, l.receiver_rank, l.channel
                        ),
                    ));
                }
            }
            (Some(s), Some(r)) => {
                let before = out.len();
                check_link(cx, &l, s, r, &mut out);
                if out.len() == before {
                    let c = w.conn_ends.len() as u32;
                    let (sb, rb) = (
                        ix.gblock(s.0 as u32, s.1 as u32),
                        ix.gblock(r.0 as u32, r.1 as u32),
                    );
                    w.conn_ends.push((sb, rb, l.channel));
                    w.out_conn[sb as usize] = c;
                    w.in_conn[rb as usize] = c;
                    w.connections += 1;
                    w.messages += l.sends.len();
                    for (&a, &b) in l.sends.iter().zip(&l.recvs) {
                        let (ga, gb) = (gid(s, a), gid(r, b));
                        w.receiver_of[ga as usize] = gb;
                        w.sender_of[gb as usize] = ga;
                    }
                }
            }
            (None, None) => unreachable!("a link has at least one end"),
        }
    }
    (w, out)
}

/// Compare the two sides of one connection; report the first disagreement only, since
/// everything after it is shifted.
fn check_link(
    cx: &Ctx,
    l: &Link,
    s: (usize, usize),
    r: (usize, usize),
    out: &mut Vec<PlanDiagnostic>,
) {
    let ix = &cx.ix;
    let gs = |i: usize| ix.gid(s.0 as u32, s.1 as u32, l.sends[i] as u32);
    let gr = |i: usize| ix.gid(r.0 as u32, r.1 as u32, l.recvs[i] as u32);
    for k in 0..l.sends.len().min(l.recvs.len()) {
        let (a, b) = (gs(k), gr(k));
        let (ca, cb) = (ix.step(a).count(), ix.step(b).count());
        if ca != cb {
            out.push(
                ix.at(
                    Check::Connection,
                    a,
                    format!(
                        "message #{k} on {} carries {ca} chunk(s), but the step receiving it expects {cb}",
                        arrow(l)
                    ),
                )
                .note(format!("message #{k} is received by {}", ix.describe(b)))
                .note("the k-th send on a connection pairs with the k-th receive; reorder the steps so both sides agree"),
            );
            return;
        }
    }
    let (ns, nr) = (l.sends.len(), l.recvs.len());
    if ns > nr {
        let a = gs(nr);
        let mut d = ix.at(
            Check::Connection,
            a,
            format!(
                "sends message #{nr} on {}, but rank {} block {} receives only {nr} message(s) on it",
                arrow(l),
                l.receiver_rank,
                r.1
            ),
        );
        if nr > 0 {
            d = d.note(format!("its last receive is {}", ix.describe(gr(nr - 1))));
        }
        out.push(d.note(format!("{} send(s) have no matching receive", ns - nr)));
    } else if nr > ns {
        let b = gr(ns);
        let mut d = ix.at(
            Check::Connection,
            b,
            format!(
                "receives message #{ns} on {}, but rank {} block {} sends only {ns} message(s) on it",
                arrow(l),
                l.sender_rank,
                s.1
            ),
        );
        if ns > 0 {
            d = d.note(format!("its last send is {}", ix.describe(gs(ns - 1))));
        }
        out.push(d.note(format!("{} receive(s) have no matching send", nr - ns)));
    }
}
