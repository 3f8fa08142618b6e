use agentstate::checkpoint::{CheckpointTuple, ListQuery};
use agentstate::Db;
use std::time::Instant;

fn touch(t: &CheckpointTuple) -> usize {
    let mut n = 0;
    for (ch, v) in &t.checkpoint.channel_values {
        n += ch.len();
        match v.as_list() {
            Some(items) => n += items.iter().filter(|m| m.is_object()).count(),
            None => n += v.as_value().map_or(0, |x| usize::from(!x.is_null())),
        }
    }
    n + t.pending_writes.len()
}

#[inline(never)]
fn list_once(saver: &agentstate::checkpoint::Checkpointer, q: &ListQuery, t: bool) -> usize {
    let l = saver.list(q).unwrap();
    if t {
        l.iter().map(touch).sum()
    } else {
        l.len()
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let db = Db::open(&a[1]).unwrap();
    let saver = db.checkpointer();
    let n: usize = a[2].parse().unwrap();
    let q = match a.get(3).map(|s| s.as_str()) {
        Some("limit") => ListQuery::thread("long").limit(10),
        Some("filter") => ListQuery::thread("long").filter(serde_json::json!({"source": "loop", "step": 50})),
        _ => ListQuery::thread("long"),
    };
    let t = a.get(4).map(|s| s != "notouch").unwrap_or(true);
    list_once(&saver, &q, t);
    let mut ts = vec![];
    let mut s = 0;
    for _ in 0..n {
        let t0 = Instant::now();
        s += list_once(&saver, &q, t);
        ts.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("median {:.3} ms min {:.3} checksum {s}", ts[ts.len() / 2], ts[0]);
}
