//! CPU time per process group, from `/proc/<pid>/stat` (user + system, all
//! threads): the worker processes, the Postgres backends serving the bench
//! database, RabbitMQ's Erlang VM (shared with anything else on the
//! broker), and the bench's own driver.

use std::collections::BTreeMap;

/// Clock ticks per second of `/proc`'s figures (USER_HZ, 100 on Linux).
const TICKS_PER_SEC: f64 = 100.0;

/// A group's name and its processes.
pub type Groups = Vec<(&'static str, Vec<u32>)>;

/// CPU seconds per group at one moment.
#[derive(Debug, Clone, Default)]
pub struct Reading(pub BTreeMap<&'static str, f64>);

/// Seconds of CPU a process has used, if it is still there.
pub fn seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) start at the state, field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / TICKS_PER_SEC)
}

pub fn read(groups: &Groups) -> Reading {
    Reading(groups.iter().map(|(name, pids)| (*name, pids.iter().filter_map(|p| seconds(*p)).sum())).collect())
}

impl Reading {
    /// Milliseconds per hop of each group between `before` and this reading.
    pub fn ms_per_hop_since(&self, before: &Reading, hops: usize) -> BTreeMap<&'static str, f64> {
        self.0
            .iter()
            .map(|(name, s)| (*name, (s - before.0.get(name).copied().unwrap_or(0.0)) * 1000.0 / hops.max(1) as f64))
            .collect()
    }
}

/// RabbitMQ's Erlang VM processes (`beam.smp`).
pub fn rabbitmq_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "beam.smp"))
        .collect()
}

/// The backends connected to a database.
pub async fn postgres_pids(pool: &baton_store::Pool, database: &str) -> anyhow::Result<Vec<u32>> {
    let rows = pool.get().await?.query("SELECT pid FROM pg_stat_activity WHERE datname = $1", &[&database]).await?;
    Ok(rows.iter().map(|r| r.get::<_, i32>(0) as u32).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_used_some_cpu() {
        let spin: u64 = (0..2_000_000u64).map(|i| i ^ (i >> 3)).sum();
        assert!(spin > 0);
        assert!(super::seconds(std::process::id()).is_some());
    }
}
