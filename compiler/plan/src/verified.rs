//! A plan the verifier proved, as a type: the only way to make a [`Verified`] is
//! [`Verified::new`], which runs [`crate::verify()`]. Executors accept nothing else, so an
//! unverified plan cannot reach one (the compiler refuses it; see the runtime's
//! compile-fail test), and a verified plan is never verified twice.

use crate::diag::PlanDiagnostic;
use crate::plan::Plan;
use crate::verify::VerifyReport;
use std::ops::Deref;

/// A plan that passed [`crate::verify()`], with a stable digest of its content.
///
/// Read-only: there is no way to change the plan inside; [`Verified::with_channels`]
/// makes a new one and proves it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    plan: Plan,
    digest: u64,
}

impl Verified {
    /// Verifies `plan`; the diagnostics when it does not verify.
    pub fn new(plan: Plan) -> Result<Verified, Vec<PlanDiagnostic>> {
        Self::with_report(plan).map(|(v, _)| v)
    }

    /// [`Verified::new`], keeping the verifier's report.
    pub fn with_report(plan: Plan) -> Result<(Verified, VerifyReport), Vec<PlanDiagnostic>> {
        let report = crate::verify(&plan)?;
        let digest = digest_of(&plan);
        Ok((Verified { plan, digest }, report))
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The plan, given up (it is no longer known to be verified once it may change).
    pub fn into_inner(self) -> Plan {
        self.plan
    }

    /// A stable 64-bit digest of the plan's canonical JSON: the same on every machine and
    /// in every process for the same plan (ranks compare it to agree on what they run).
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// The same plan replicated on `channels` channel sets, proved again (the replica
    /// count bounds the connection channels a plan may use).
    pub fn with_channels(&self, channels: u32) -> Result<Verified, Vec<PlanDiagnostic>> {
        if channels == self.plan.channels {
            return Ok(self.clone());
        }
        let mut p = self.plan.clone();
        p.channels = channels;
        Verified::new(p)
    }

    /// The same plan without the message sizes its producer meant it for (a caller that
    /// asks for this plan by name runs it at any size). The byte range only guides
    /// selection; what the verifier proved holds at every size.
    pub fn any_size(&self) -> Verified {
        let mut plan = self.plan.clone();
        plan.bytes = None;
        let digest = digest_of(&plan);
        Verified { plan, digest }
    }
}

impl Deref for Verified {
    type Target = Plan;
    fn deref(&self) -> &Plan {
        &self.plan
    }
}

/// FNV-1a over the canonical JSON, folded twice: stable across Rust versions and
/// platforms (the standard library's hasher is not).
fn digest_of(plan: &Plan) -> u64 {
    let json = plan.to_json_pretty();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in json.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Plan {
        Plan::from_json(include_str!(
            "../../../tests/plans/good/exchange_allgather_2.json"
        ))
        .unwrap()
    }

    #[test]
    fn only_a_plan_that_verifies_becomes_verified() {
        let good = Verified::new(fixture()).unwrap();
        assert_eq!(good.name, fixture().name);
        let mut bad = fixture();
        bad.ranks[1].blocks[1].steps[0].dst.as_mut().unwrap().offset = 2;
        assert!(Verified::new(bad).is_err());
    }

    #[test]
    fn the_digest_follows_the_content() {
        let a = Verified::new(fixture()).unwrap();
        let b = Verified::new(fixture()).unwrap();
        assert_eq!(a.digest(), b.digest());
        let c = a.with_channels(2).unwrap();
        assert_eq!(c.channels, 2);
        assert_ne!(a.digest(), c.digest());
        assert_eq!(a.with_channels(a.channels).unwrap().digest(), a.digest());
    }
}
