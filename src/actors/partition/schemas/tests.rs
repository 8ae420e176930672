use super::*;
use crate::config::schema_registry::SchemaRegistryConfig;

fn rec(offset: i64, src: Src, payload: &[u8]) -> Record {
    Record {
        partition: 0,
        offset,
        src,
        key: None,
        payload: Some(bytes::Bytes::copy_from_slice(payload)),
        timestamp_ms: None,
        headers: None,
    }
}

fn framed(id: u32) -> Vec<u8> {
    let mut v = crate::core::schema::frame::header(id).to_vec();
    v.push(0);
    v
}

fn offsets(rs: &[Record]) -> Vec<i64> {
    rs.iter().map(|r| r.offset).collect()
}

fn gate() -> SchemaGate {
    let registry = SchemaRegistry::new(
        &SchemaRegistryConfig {
            url: "http://127.0.0.1:1".into(),
            ..Default::default()
        },
        crate::core::input::InputFormat::Avro,
    );
    SchemaGate::new(Arc::new(registry), 0)
}

#[test]
fn records_wait_behind_an_unknown_schema_in_offset_order() {
    let mut g = gate();
    // Unframed records go on (the machine parks them); the first record
    // naming an unresolved id stops everything after it on main p.
    let (now, fetch) = g.admit(vec![
        rec(0, Src::Main, b"{}"),
        rec(1, Src::Main, &framed(7)),
        rec(2, Src::Main, b"{}"),
        rec(3, Src::Main, &framed(8)),
    ]);
    assert_eq!((offsets(&now), fetch), (vec![0], Some(7)));
    assert!(g.is_waiting());
    // While waiting: main records queue, DLQ records (envelopes) pass.
    let (now, fetch) = g.admit(vec![
        rec(4, Src::Main, &framed(7)),
        rec(0, Src::Dlq, &framed(7)),
    ]);
    assert_eq!(
        (offsets(&now), now[0].src, fetch),
        (vec![0], Src::Dlq, None)
    );
    // 7 resolved: 1, 2 go, then 3 waits for 8.
    let (now, fetch) = g.resolved(7, Arc::new(Resolved::Unknown));
    assert_eq!((offsets(&now), fetch), (vec![1, 2], Some(8)));
    let (now, fetch) = g.resolved(8, Arc::new(Resolved::Unknown));
    assert_eq!((offsets(&now), fetch), (vec![3, 4], None));
    assert!(!g.is_waiting());
    // Known ids pass at once.
    let (now, fetch) = g.admit(vec![rec(5, Src::Main, &framed(8))]);
    assert_eq!((offsets(&now), fetch), (vec![5], None));
}

#[test]
fn a_drain_drops_the_waiting_records_unbegun() {
    let mut g = gate();
    let (_, fetch) = g.admit(vec![
        rec(0, Src::Main, &framed(7)),
        rec(1, Src::Main, &framed(7)),
    ]);
    assert_eq!(fetch, Some(7));
    g.close();
    assert!(!g.is_waiting());
    // A late answer hands nothing over; later records go to the machine
    // (which ignores them while draining).
    assert!(g.resolved(7, Arc::new(Resolved::Unknown)).0.is_empty());
    assert_eq!(
        offsets(&g.admit(vec![rec(2, Src::Main, &framed(9))]).0),
        vec![2]
    );
}

#[test]
fn the_schemas_a_partition_keeps_stay_within_cache_max_bytes() {
    let budget = 64 * 1024;
    let registry = SchemaRegistry::new(
        &SchemaRegistryConfig {
            url: "http://127.0.0.1:1".into(),
            cache_max_bytes: budget,
            ..Default::default()
        },
        crate::core::input::InputFormat::Avro,
    );
    let mut g = SchemaGate::new(Arc::new(registry), 0);
    // A record per id, each id unknown: every answer is kept a while,
    // none for good.
    let ids = 3 * budget as u32 / 64;
    for id in 0..ids {
        let (_, fetch) = g.admit(vec![rec(i64::from(id), Src::Main, &framed(id))]);
        assert_eq!(fetch, Some(id));
        let (now, _) = g.resolved(id, Arc::new(Resolved::Unknown));
        assert_eq!(offsets(&now), vec![i64::from(id)]);
        // The machine begins it: its decoder looks the schema up.
        assert!(g.known.lock().unwrap().get(&id).is_some());
    }
    let known = g.known.lock().unwrap();
    let kept = known.len();
    assert!(kept <= budget / 64, "{kept} answers kept");
    assert!(known.weight() <= budget && !known.is_empty());
}

/// A schema of `bytes` weight that is no refusal.
fn schema(bytes: usize) -> Arc<Resolved> {
    Arc::new(Resolved::Other("S".repeat(bytes - 64)))
}

#[test]
fn a_schema_stays_while_a_record_handed_out_has_not_looked_it_up() {
    let mut g = gate_with(64 * 1024, Duration::from_secs(60));
    // Record 0 names id 1 (40 KiB): handed to the machine, not begun.
    let (_, fetch) = g.admit(vec![rec(0, Src::Main, &framed(1))]);
    assert_eq!(fetch, Some(1));
    assert_eq!(offsets(&g.resolved(1, schema(40 * 1024)).0), vec![0]);
    // Other schemas pass the budget: the pinned one stays, the others go.
    for id in 2..6 {
        g.admit(vec![rec(i64::from(id), Src::Main, &framed(id))]);
        g.resolved(id, schema(20 * 1024));
        let k = g.known.lock().unwrap();
        assert!(k.get(&id).is_some(), "the newest is kept");
    }
    // Record 0 is begun: its decoder finds its schema.
    assert!(g.known.lock().unwrap().get(&1).is_some());
    // Now nothing pins it: the next schema past the budget evicts it.
    g.admit(vec![rec(9, Src::Main, &framed(9))]);
    g.resolved(9, schema(20 * 1024));
    let k = g.known.lock().unwrap();
    assert!(k.get(&1).is_none(), "unpinned and least recently named");
    assert!(k.weight() <= 64 * 1024, "{}", k.weight());
}

fn gate_with(budget: usize, ttl: Duration) -> SchemaGate {
    let registry = SchemaRegistry::new(
        &SchemaRegistryConfig {
            url: "http://127.0.0.1:1".into(),
            cache_max_bytes: budget,
            negative_cache_ttl: ttl,
            ..Default::default()
        },
        crate::core::input::InputFormat::Avro,
    );
    SchemaGate::new(Arc::new(registry), 0)
}

#[tokio::test(start_paused = true)]
async fn an_unknown_id_is_asked_again_after_negative_cache_ttl() {
    let ttl = Duration::from_secs(60);
    let mut g = gate_with(64 * 1024, ttl);
    let (_, fetch) = g.admit(vec![rec(0, Src::Main, &framed(7))]);
    assert_eq!(fetch, Some(7));
    assert_eq!(
        offsets(&g.resolved(7, Arc::new(Resolved::Unknown)).0),
        vec![0]
    );
    // Within the period: the answer stands, nothing is asked.
    tokio::time::advance(ttl - Duration::from_millis(1)).await;
    let (now, fetch) = g.admit(vec![rec(1, Src::Main, &framed(7))]);
    assert_eq!((offsets(&now), fetch), (vec![1], None));
    // After it: asked again; the waiting records take the new answer.
    tokio::time::advance(Duration::from_millis(1)).await;
    let (now, fetch) = g.admit(vec![rec(2, Src::Main, &framed(7))]);
    assert_eq!((offsets(&now), fetch), (vec![], Some(7)));
    let (now, _) = g.resolved(7, schema(100));
    assert_eq!(offsets(&now), vec![2]);
    // A schema does not expire.
    tokio::time::advance(ttl * 10).await;
    assert_eq!(g.admit(vec![rec(3, Src::Main, &framed(7))]).1, None);
}
