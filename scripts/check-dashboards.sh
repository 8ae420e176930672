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
echo "check-dashboards: ok"
