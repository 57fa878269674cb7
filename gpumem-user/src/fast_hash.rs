//! The hash maps the agent touches at every record: foldhash, seeded at
//! random per map, rather than std's SipHash (a tenth of a record's time
//! where it was used; the keys are pids, cgroup ids and addresses, and a
//! random seed keeps a process from choosing addresses that collide).
pub type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub type HashSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;
