#!/usr/bin/env bash
# Checks deploy/ (scripts/test.sh runs it; no cluster, no Docker engine needed):
#   - helm (v3.22.0, `go install`ed once into ~/.cache/courier/bin) lints the chart with
#     its default values and with ci/full-values.yaml (every option set);
#   - `helm template` renders: the defaults, every option, and three releases for three
#     topics into one namespace;
#   - scripts/checks/cmd/k8scheck validates each rendering: strict decoding into the
#     Kubernetes API types (unknown fields, wrong types), names/labels/ports/selectors,
#     Pod Security "restricted" (k8s.io/pod-security-admission), no `latest` image, no
#     service-account token, read-only root, grace period vs shutdown_grace, and — for the
#     three releases — no name or selector collisions;
#   - the PrometheusRules' rules pass `promtool check rules`;
#   - every rendered courier.toml passes `courier check-config` (Courier's own parser);
#   - deploy/courier.yaml is what the chart renders from deploy/courier-values.yaml;
#   - the checks fail on bad input (a manifest without seccompProfile, with image :latest,
#     with an unknown field, ... each must be refused): a check that cannot fail is none;
#   - scripts/check-dockerfile.sh.
# Usage: scripts/check-deploy.sh [--update]   (--update rewrites deploy/courier.yaml)
set -euo pipefail
# The Go toolchain of this kind of machine lives in /usr/local/go.
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
cd "$(dirname "$0")/.."

HELM_VERSION=v3.22.0
KUBE_VERSION=1.33.0
CHART=deploy/helm/courier
cache=${COURIER_TOOL_CACHE:-$HOME/.cache/courier}/bin

# helm from its Go module, once.
helm=$cache/helm
# (A go-installed helm reports only "v3.22" itself: read the module version instead.)
if ! [[ -x $helm ]] || [[ $(go version -m "$helm" 2>/dev/null | awk '$1=="mod" && $2=="helm.sh/helm/v3" {print $3}') != "$HELM_VERSION" ]]; then
    echo "installing helm $HELM_VERSION (go install, once)" >&2
    mkdir -p "$cache"
    GOBIN=$cache go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi
PROMTOOL=${COURIER_TEST_PROMTOOL:-$(command -v promtool || true)}
[[ -x $PROMTOOL ]] || { echo "check-deploy: promtool not found: run scripts/services.sh up (it installs Debian's prometheus package)" >&2; exit 1; }
courier=${COURIER_BIN:-target/debug/courier}
[[ -x $courier ]] || { echo "check-deploy: $courier not built: cargo build --bin courier first (scripts/test.sh does)" >&2; exit 1; }
k8scheck=$(bash scripts/checks/build.sh k8scheck)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# helm warns on stderr that files/alerts.yml is a link (to dashboards/alerts.yml): known.
helmq() { "$helm" "$@" 2> >(grep -v 'found symbolic link in path' >&2); }
render() { # release values-args... -> stdout
    local release=$1; shift
    helmq template "$release" "$CHART" --namespace courier --kube-version "$KUBE_VERSION" "$@"
}
# The courier.toml of each ConfigMap in a rendering, through `courier check-config`, with
# the secret variables the config names set to placeholders, and the secret files it
# names under /var/run/secrets/courier/ (projected from Secrets in a cluster) replaced by
# placeholder files. The placeholder is a well-formed Standard Webhooks secret, so it
# passes for a signing secret as well as for a token or a password.
placeholder=whsec_cGxhY2Vob2xkZXItc2VjcmV0LWJ5dGVz
check_configs() {
    local file=$1 n=0
    local dir=$work/configs-$(basename "$file" .yaml)
    mkdir -p "$dir"
    awk -v dir="$dir" '
        /^kind: ConfigMap/ { cm++ }
        /^  courier.toml: \|/ { out = dir "/" cm ".toml"; next }
        out && /^    / { print substr($0, 5) > out; next }
        out && /^$/ { print "" > out; next }
        { out = "" }' "$file"
    for toml in "$dir"/*.toml; do
        n=$((n + 1))
        env_vars=()
        while IFS= read -r var; do env_vars+=("$var=$placeholder"); done \
            < <(sed -n 's/^[a-z_]*_env = "\(.*\)"$/\1/p' "$toml")
        while IFS= read -r f; do
            mkdir -p "$(dirname "$dir/secrets/$f")"; echo "$placeholder" >"$dir/secrets/$f"
        done < <(sed -n 's|^[a-z_]*_file = "/var/run/secrets/courier/\(.*\)"$|\1|p' "$toml")
        sed -i "s|= \"/var/run/secrets/courier/|= \"$dir/secrets/|" "$toml"
        # The TLS files [kafka.properties] names (`"ssl.ca.location" = "/etc/…"`), which
        # check-config reads: placeholder files too, under $dir/files.
        while IFS= read -r f; do
            mkdir -p "$(dirname "$dir/files$f")"; echo "$placeholder" >"$dir/files$f"
        done < <(sed -n 's|^"ssl\.[a-z.]*location" = "\(/[^"]*\)"$|\1|p' "$toml")
        sed -i "s|^\(\"ssl\.[a-z.]*location\" = \"\)/|\1$dir/files/|" "$toml"
        if ! out=$(env "${env_vars[@]}" "$courier" check-config --config "$toml" 2>&1); then
            echo "check-deploy: $file: courier.toml #$n fails check-config:"; echo "$out"; cat -n "$toml"; return 1
        fi
        echo "  $(basename "$file"): courier.toml #$n: $out"
    done
    [[ $n -gt 0 ]] || { echo "check-deploy: $file: no courier.toml"; return 1; }
}

echo "== helm lint"
helmq lint --strict "$CHART" --kube-version "$KUBE_VERSION"
helmq lint --strict "$CHART" --kube-version "$KUBE_VERSION" -f "$CHART/ci/full-values.yaml"

echo "== helm template"
render courier >"$work/default.yaml"
render orders -f "$CHART/ci/full-values.yaml" >"$work/full.yaml"
# Three releases, three topics, one namespace (what deploy/README.md describes).
for t in orders payments profiles; do
    render "$t" --set "config.kafka.topic=$t" --set serviceMonitor.enabled=true --set prometheusRule.enabled=true
done >"$work/three.yaml"
render courier -f deploy/courier-values.yaml >"$work/plain.yaml"

echo "== schemas and policies (k8scheck)"
"$k8scheck" "$work/default.yaml"
"$k8scheck" -rules-dir "$work/rules-full" "$work/full.yaml"
"$k8scheck" -rules-dir "$work/rules-three" "$work/three.yaml"
"$k8scheck" "$work/plain.yaml"
if grep -nE 'image: .*:latest"?$' "$work"/*.yaml; then echo "check-deploy: a rendered image uses :latest"; exit 1; fi

echo "== PrometheusRule rules (promtool)"
"$PROMTOOL" check rules "$work"/rules-full/*.yml "$work"/rules-three/*.yml
[[ $(ls "$work"/rules-three/*.yml | wc -l) -eq 3 ]] || { echo "check-deploy: expected one PrometheusRule per release"; exit 1; }
for t in orders payments profiles; do
    # Each release's rules watch its own group only.
    if grep -q 'group!=""' "$work/rules-three/$t-courier.yml" \
        || ! grep -q "group=\"$t-courier\"" "$work/rules-three/$t-courier.yml"; then
        echo "check-deploy: the rules of release $t are not scoped to group $t-courier"; exit 1
    fi
done

echo "== rendered courier.toml (courier check-config)"
for f in default full three plain; do check_configs "$work/$f.yaml"; done

echo "== deploy/courier.yaml (the plain manifests)"
{
    echo "# GENERATED: \`helm template courier deploy/helm/courier --namespace courier --kube-version $KUBE_VERSION -f deploy/courier-values.yaml\`."
    echo "# Do not edit: change the chart or deploy/courier-values.yaml, then run"
    echo "# \`bash scripts/check-deploy.sh --update\`. The Secret is not here: see secret.example.yaml."
    echo "# The ServiceMonitor and PrometheusRule need the Prometheus Operator's CRDs."
    cat "$work/plain.yaml"
} >"$work/courier.yaml"
if [[ ${1:-} == --update ]]; then
    cp "$work/courier.yaml" deploy/courier.yaml
    echo "deploy/courier.yaml rewritten"
elif ! diff -u deploy/courier.yaml "$work/courier.yaml" >"$work/plain.diff"; then
    head -40 "$work/plain.diff"
    echo "check-deploy: deploy/courier.yaml is stale: run bash scripts/check-deploy.sh --update"
    exit 1
fi

echo "== the checks refuse bad input"
expect_refusal() { # description, pattern the output must contain, command...
    local what=$1 pattern=$2; shift 2
    local out
    if out=$("$@" 2>&1); then
        echo "check-deploy: self-test '$what': accepted, must be refused"; exit 1
    fi
    if ! grep -q -- "$pattern" <<<"$out"; then
        echo "check-deploy: self-test '$what': refused, but not for '$pattern':"; echo "$out"; exit 1
    fi
    echo "  refused as expected: $what"
}
mutate() { sed "$1" "$work/default.yaml" >"$work/bad.yaml"; echo "$work/bad.yaml"; }
expect_refusal "no seccompProfile" 'violates Pod Security "restricted"' "$k8scheck" "$(mutate '/seccompProfile:/,+1d')"
expect_refusal "image :latest" 'uses the tag latest' "$k8scheck" "$(mutate 's|image: "courier:[^"]*"|image: "courier:latest"|')"
expect_refusal "untagged image" 'neither a tag nor a digest' "$k8scheck" "$(mutate 's|image: "courier:[^"]*"|image: "courier"|')"
expect_refusal "unknown field" 'unknown field "hostNetwrok"' "$k8scheck" "$(mutate 's|^      automountServiceAccountToken: false|&\n      hostNetwrok: true|')"
expect_refusal "privilege escalation" 'allowPrivilegeEscalation' "$k8scheck" "$(mutate 's|allowPrivilegeEscalation: false|allowPrivilegeEscalation: true|')"
expect_refusal "writable root filesystem" 'readOnlyRootFilesystem must be true' "$k8scheck" "$(mutate 's|readOnlyRootFilesystem: true|readOnlyRootFilesystem: false|')"
expect_refusal "service-account token" 'automountServiceAccountToken must be false' "$k8scheck" "$(mutate 's|^      automountServiceAccountToken: false|      automountServiceAccountToken: true|')"
expect_refusal "service links on" 'enableServiceLinks must be false' "$k8scheck" "$(mutate '/enableServiceLinks: false/d')"
expect_refusal "no NetworkPolicy" 'no NetworkPolicy with policyTypes Ingress selects the pods' "$k8scheck" "$(awk 'BEGIN{RS="---\n"; ORS="---\n"} !/kind: NetworkPolicy/' "$work/default.yaml" >"$work/bad.yaml"; echo "$work/bad.yaml")"
expect_refusal "NetworkPolicy ingress from anywhere" 'has no `from`' "$k8scheck" "$(mutate '/^      from:$/,/app.kubernetes.io\/name: prometheus/d')"
expect_refusal "NetworkPolicy on an undeclared port" 'is not a port of' "$k8scheck" "$(mutate '/^    - ports:$/{n;s/port: metrics/port: metricz/}')"
expect_refusal "grace below shutdown_grace" 'terminationGracePeriodSeconds 20 is below' "$k8scheck" "$(mutate 's|terminationGracePeriodSeconds: [0-9]*|terminationGracePeriodSeconds: 20|')"
expect_refusal "probe on an undeclared port" 'which the container does not declare' "$k8scheck" "$(mutate '0,/^              port: metrics$/s//              port: metricz/')"
cat "$work/default.yaml" "$work/default.yaml" >"$work/twice.yaml"
expect_refusal "two releases with one name" 'name collides' "$k8scheck" "$work/twice.yaml"
expect_refusal "helm: image.tag=latest" '`latest` is not allowed' render x --set image.tag=latest
expect_refusal "helm: a *_env no Secret provides" 'neither secrets.env nor extraEnv provides it' render x --set config.api.token_env=COURIER_API_TOKEN
expect_refusal "helm: a *_file no Secret projects" 'no secrets.files item projects the path oauth2-secret' render x --set config.api.token_file=null --set config.api.oauth2.client_secret_file=/var/run/secrets/courier/oauth2-secret
expect_refusal "helm: a path projected twice" 'the path api-token is projected twice' render x --set-json 'secrets.files=[{"items":[{"key":"api-token","path":"api-token"}]},{"secretName":"other","items":[{"key":"token","path":"api-token"}]}]'
expect_refusal "helm: metrics on loopback" 'must be 0.0.0.0:<port>' render x --set config.metrics.listen=127.0.0.1:9464
expect_refusal "helm: not a duration" 'is not a duration' render x --set config.pipeline.shutdown_grace=soon
expect_refusal "helm: a misspelled option" "additional properties 'replicaCnt' not allowed" render x --set replicaCnt=3
expect_refusal "helm: NetworkPolicy admitting every pod" 'an empty `from` would admit' render x --set networkPolicy.metrics.namespaceSelector=null --set networkPolicy.metrics.podSelector=null
expect_refusal "helm: a misspelled NetworkPolicy option" "additional properties 'restrcit' not allowed" render x --set networkPolicy.egress.restrcit=true
expect_refusal "helm: a nested *_env no Secret provides" 'config.kafka.tls.key_password_env names' render x --set config.kafka.tls.key_password_env=KEY_PASSWORD
sed 's/^listen = .*/listen = "0.0.0.0:9464"\nlisten_typo = 1/' "$work/configs-default/1.toml" >"$work/bad.toml"
expect_refusal "check-config: unknown key" 'listen_typo' "$courier" check-config --config "$work/bad.toml"

echo "== Dockerfile"
bash scripts/check-dockerfile.sh
sed 's/^USER 10001:10001$/USER courier/' Dockerfile >"$work/Dockerfile.bad"
expect_refusal "Dockerfile: named USER" 'use a numeric uid' bash scripts/check-dockerfile.sh "$work/Dockerfile.bad"
sed 's/ca-certificates libssl3t64/ca-certificates curl libssl3t64/' Dockerfile >"$work/Dockerfile.bad"
expect_refusal "Dockerfile: curl in the runtime" 'curl/wget' bash scripts/check-dockerfile.sh "$work/Dockerfile.bad"
grep -v -e '^HEALTHCHECK' -e 'CMD \["courier", "healthcheck"' Dockerfile >"$work/Dockerfile.bad"
expect_refusal "Dockerfile: no HEALTHCHECK" 'no HEALTHCHECK' bash scripts/check-dockerfile.sh "$work/Dockerfile.bad"
sed 's|CMD \["courier", "healthcheck", "--config", "/etc/courier/courier.toml"\]|CMD ["courier", "healthcheck", "--config", "/etc/courier/other.toml"]|' Dockerfile >"$work/Dockerfile.bad"
expect_refusal "Dockerfile: HEALTHCHECK on another config" 'is not the config CMD runs with' bash scripts/check-dockerfile.sh "$work/Dockerfile.bad"
sed 's/^ARG RUNTIME_IMAGE=.*/ARG RUNTIME_IMAGE=debian:latest/' Dockerfile >"$work/Dockerfile.bad"
expect_refusal "Dockerfile: FROM latest" 'is not a version' bash scripts/check-dockerfile.sh "$work/Dockerfile.bad"
sed 's/^EXPOSE 9464$/ENV COURIER__METRICS__LISTEN=0.0.0.0:9464\n&/' Dockerfile >"$work/Dockerfile.bad"
expect_refusal "Dockerfile: COURIER__ env" 'COURIER__' bash scripts/check-dockerfile.sh "$work/Dockerfile.bad"

echo "check-deploy: ok"
