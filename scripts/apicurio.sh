#!/usr/bin/env bash
# Fetches (once) Apicurio Registry, the real Schema Registry of the
# schema-registry tests (its Confluent-compatible API, `/apis/ccompat/v7`, is
# what confluent-kafka's serializers and Courier speak), from Maven Central.
# Prints the path of its runner jar (give it to the tests as COURIER_TEST_APICURIO).
#
# Why 2.6.13.Final: the 2.x line publishes the whole application on Maven Central
# (`apicurio-registry-app-<v>-all.zip`: the Quarkus runner jar and its lib/,
# 142 MB), which runs on the Java 17 here with in-memory or file H2 storage.
# The 3.x line publishes only the app's module jar (a Quarkus build of it needs
# deployment modules Maven Central does not serve). Idempotent: a second run
# only checks the cache.
set -euo pipefail

VERSION=2.6.13.Final
cache=${COURIER_TOOL_CACHE:-$HOME/.cache/courier}/apicurio-$VERSION
jar=$cache/apicurio-registry-app-$VERSION-runner.jar
url=https://repo1.maven.org/maven2/io/apicurio/apicurio-registry-app/$VERSION/apicurio-registry-app-$VERSION-all.zip

if [[ ! -f $jar || ! -d $cache/lib ]]; then
    command -v java >/dev/null || { echo "apicurio.sh: java is needed (Java 17 or newer)" >&2; exit 1; }
    echo "fetching Apicurio Registry $VERSION from Maven Central (once, 142 MB)" >&2
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    curl -fsSL --retry 3 -o "$work/all.zip" "$url"
    # Maven Central's own checksum of the artifact.
    want=$(curl -fsSL --retry 3 "$url.sha1")
    got=$(sha1sum "$work/all.zip" | cut -d' ' -f1)
    [[ ${want%% *} == "$got" ]] || { echo "apicurio.sh: sha1 $got of $url is not Maven Central's $want" >&2; exit 1; }
    unzip -q "$work/all.zip" -d "$work/dist"
    [[ -f $work/dist/apicurio-registry-app-$VERSION-runner.jar ]] ||
        { echo "apicurio.sh: no runner jar in $url" >&2; exit 1; }
    rm -rf "$cache"
    mkdir -p "$(dirname "$cache")"
    mv "$work/dist" "$cache"
fi
echo "$jar"
