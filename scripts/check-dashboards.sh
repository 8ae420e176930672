#!/usr/bin/env bash
# Checks dashboards/ without any service (scripts/test.sh runs it):
#   - promtool check rules dashboards/alerts.yml;
#   - promtool test rules dashboards/alerts_test.yml, against the rules without their
#     annotations (promtool compares those verbatim; the tests are about when alerts
#     fire, and with which labels);
#   - the Grafana check (scripts/checks/cmd/dashcheck): each dashboard decoded strictly
#     into Grafana's schema types, the rules of Grafana's dashboard linter (exclusions
#     with reasons in dashboards/.lint), panel layout; and every panel and variable query
#     parsed by promtool.
# promtool comes with Debian's prometheus package (scripts/services.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

PROMTOOL=${COURIER_TEST_PROMTOOL:-$(command -v promtool || true)}
[[ -x $PROMTOOL ]] || { echo "check-dashboards: promtool not found: run scripts/services.sh up (it installs Debian's prometheus package)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PROMTOOL" check rules dashboards/alerts.yml

cp dashboards/alerts_test.yml "$work/"
awk '/^ +annotations:/{skip=1; ind=match($0,/[^ ]/); next}
     skip && (NF==0 || match($0,/[^ ]/)>ind){next} {skip=0; print}' \
    dashboards/alerts.yml >"$work/alerts.yml"
"$PROMTOOL" test rules "$work/alerts_test.yml"

dashcheck=$(bash scripts/checks/build.sh dashcheck)
"$dashcheck" -promql "$work/dashboard-queries.yml" dashboards/*.json
"$PROMTOOL" check rules "$work/dashboard-queries.yml" >/dev/null \
    || { "$PROMTOOL" check rules "$work/dashboard-queries.yml"; exit 1; }
# The checks refuse bad input (a check that cannot fail is none).
expect_refusal() { # description, pattern the output must contain, command...
    local what=$1 pattern=$2; shift 2
    local out
    if out=$("$@" 2>&1); then
        echo "check-dashboards: self-test '$what': accepted, must be refused"; exit 1
    fi
    if ! grep -q -- "$pattern" <<<"$out"; then
        echo "check-dashboards: self-test '$what': refused, but not for '$pattern':"; echo "$out"; exit 1
    fi
    echo "  refused as expected: $what"
}
mkdir -p "$work/bad"
python3 - "$work/bad" <<'PY'
import json, sys
out = sys.argv[1]
d = json.load(open("dashboards/courier-overview.json"))
panels = [p for p in d["panels"] if p["type"] != "row"]
def write(name, dash):
    json.dump(dash, open(f"{out}/{name}.json", "w"))
bad = json.loads(json.dumps(d)); [p for p in bad["panels"] if p["type"] != "row"][0]["titel"] = "x"; write("unknown-field", bad)
bad = json.loads(json.dumps(d)); [p for p in bad["panels"] if p["type"] == "timeseries"][0]["fieldConfig"]["defaults"].pop("unit"); write("no-unit", bad)
bad = json.loads(json.dumps(d)); [p for p in bad["panels"] if p["type"] == "timeseries"][0]["targets"][0]["expr"] = "rate(courier_delivered_total[5m])"; write("fixed-window", bad)
bad = json.loads(json.dumps(d)); q = [p for p in bad["panels"] if p["type"] != "row"]; q[1]["gridPos"] = dict(q[0]["gridPos"]); write("overlap", bad)
PY
# Each in its own directory, with the real exclusions beside it.
for f in unknown-field no-unit fixed-window overlap; do
    mkdir -p "$work/bad/$f"; mv "$work/bad/$f.json" "$work/bad/$f/"; cp dashboards/.lint "$work/bad/$f/"
done
expect_refusal "dashboard: unknown panel field" 'titel' "$dashcheck" "$work/bad/unknown-field/unknown-field.json"
expect_refusal "dashboard: panel without a unit" 'panel-units-rule' "$dashcheck" "$work/bad/no-unit/no-unit.json"
expect_refusal "dashboard: rate over a fixed window" 'target-rate-interval-rule' "$dashcheck" "$work/bad/fixed-window/fixed-window.json"
expect_refusal "dashboard: overlapping panels" 'overlaps panel' "$dashcheck" "$work/bad/overlap/overlap.json"
# An outage on three instances must page once: aggregating per instance pages three times.
sed -i 's/sum by (group, main_topic, destination) (courier_api_unavailable{group!=""}) > 0$/sum by (group, main_topic, destination, instance) (courier_api_unavailable{group!=""}) > 0/' "$work/alerts.yml"
grep -q 'destination, instance) (courier_api_unavailable' "$work/alerts.yml" || { echo "check-dashboards: self-test could not rewrite CourierApiUnavailable"; exit 1; }
expect_refusal "alerts: one page per instance" 'instance="c:9464"' "$PROMTOOL" test rules "$work/alerts_test.yml"
echo "check-dashboards: ok"
