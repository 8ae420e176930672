//! The throughput half of issue 23 item 4: one tenant answered 403 among the
//! others, against the same run without it (docs/BENCHMARKS.md). Needs the test
//! services (`source $COURIER_STATE/services.env`) and the `courier` binary.

#[path = "../tests/common/mod.rs"]
mod common;

/// The benchmark for the throughput half of issue 23 item 4 (`cargo bench --features test-hooks --bench tenant_403`, with the services
/// of `scripts/services.sh` in the environment; `BENCH_ROUNDS` rounds, default 5): the same
/// run with and without the 20 refused events, the median of each and their
/// ratio (docs/BENCHMARKS.md).
async fn bench_tenant_403() {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let others: usize = std::env::var("BENCH_OTHERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let refused = others / 100;
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let (_, a) = common::tenant::tenant_403_run(&format!("b403r{r}"), others, refused).await;
        let (_, b) = common::tenant::tenant_403_run(&format!("b403b{r}"), others, 0).await;
        println!(
            "[bench403] round {r}: with {refused} refused {:.0}/s, without {:.0}/s, ratio {:.3}",
            others as f64 / a,
            others as f64 / b,
            b / a
        );
        with.push(others as f64 / a);
        without.push(others as f64 / b);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ratios: Vec<f64> = with.iter().zip(&without).map(|(a, b)| a / b).collect();
    let (mw, mo) = (median(&mut with), median(&mut without));
    let mut rs = ratios.clone();
    println!(
        "[bench403] {rounds} rounds, {others} others: median with {mw:.0}/s, without {mo:.0}/s; ratio of medians {:.3}, median ratio {:.3}, ratios {ratios:.3?}",
        mw / mo,
        median(&mut rs)
    );
}

fn main() -> anyhow::Result<()> {
    if !courier_testkit::asked_as_benchmark("tenant_403") {
        return Ok(());
    }
    tokio::runtime::Runtime::new()?.block_on(bench_tenant_403());
    Ok(())
}
