#!/usr/bin/env bash
# Installs (idempotently, cached) and runs the real services the integration tests need,
# on loopback: a single-node KRaft Kafka broker (jars from Maven Central), Redis and
# PostgreSQL; installs Prometheus (not started: tests run their own). No Docker, no systemd.
#
#   scripts/services.sh up|down|status|clean
#   scripts/services.sh kafka-stop|kafka-start|kafka-kill
#   scripts/services.sh kafka-reset   (stop Kafka, delete its topics and groups: test data only)
#   scripts/services.sh redis-stop|redis-start
#   scripts/services.sh pg-stop|pg-start
#
# Environment:
#   COURIER_CACHE   downloaded jars          (default: $HOME/.cache/courier)
#   COURIER_STATE   data dirs, logs, pids    (default: /tmp/courier-services)
#   COURIER_KAFKA_PORT (19092) COURIER_KAFKA_CONTROLLER_PORT (19093)
#   COURIER_REDIS_PORT (16379) COURIER_PG_PORT (15432)
#   COURIER_KAFKA_PROXIED_PORT (19095) COURIER_KAFKA_PROXIED_ADVERTISED_PORT (19096): the chaos
#     drills' listener, advertised at the port Toxiproxy forwards from (scripts/toxiproxy.sh)
#   COURIER_KAFKA_SSL_PORT (19097): TLS listener requiring a client certificate
#   COURIER_KAFKA_SASL_SSL_PORT (19098): SASL over TLS (SCRAM-SHA-256, PLAIN, OAUTHBEARER)
#   COURIER_REDIS_TLS_PORT (16380): Redis's TLS port (PostgreSQL takes TLS on its own port)
#   COURIER_KAFKA_READY_TIMEOUT seconds (60), COURIER_PG_BIN (newest /usr/lib/postgresql/*/bin)
#
# After `up`, $COURIER_STATE/services.env holds the exports the tests read.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SCRIPT_PATH="$SCRIPT_DIR/$(basename "${BASH_SOURCE[0]}")"

CACHE="${COURIER_CACHE:-${HOME:-/tmp}/.cache/courier}"
STATE="${COURIER_STATE:-/tmp/courier-services}"

KAFKA_VERSION="4.4.0"
# Kafka 4.4 is still on SLF4J 1.7 (slf4j-api 1.7.36): the binding is log4j-slf4j-impl.
LOG4J_VERSION="2.24.3"

# Ports: environment > what `up` saved in the state dir (so `kafka-stop` etc. hit the instance
# that `up` started even without the variables) > defaults.
PORTS_FILE="$STATE/ports.env"
if [[ -f $PORTS_FILE ]]; then
    while IFS='=' read -r k v; do
        case $k in
            COURIER_KAFKA_PORT | COURIER_KAFKA_CONTROLLER_PORT | COURIER_KAFKA_SASL_PORT | COURIER_REDIS_PORT | COURIER_PG_PORT | \
            COURIER_KAFKA_SSL_PORT | COURIER_KAFKA_SASL_SSL_PORT | COURIER_REDIS_TLS_PORT | \
            COURIER_KAFKA_PROXIED_PORT | COURIER_KAFKA_PROXIED_ADVERTISED_PORT)
                if [[ -z ${!k:-} && $v =~ ^[0-9]+$ ]]; then printf -v "SAVED_$k" '%s' "$v"; fi ;;
        esac
    done <"$PORTS_FILE"
fi
KAFKA_PORT="${COURIER_KAFKA_PORT:-${SAVED_COURIER_KAFKA_PORT:-19092}}"
KAFKA_CONTROLLER_PORT="${COURIER_KAFKA_CONTROLLER_PORT:-${SAVED_COURIER_KAFKA_CONTROLLER_PORT:-19093}}"
# A second listener with SASL/SCRAM-SHA-256, for the security tests. The test user and
# its password are test fixtures, not secrets of any deployment.
KAFKA_SASL_PORT="${COURIER_KAFKA_SASL_PORT:-${SAVED_COURIER_KAFKA_SASL_PORT:-19094}}"
SASL_USER=courier
SASL_PASSWORD=courier-scram-test
# A third listener for the chaos drills (docs/DRILLS.md): the broker listens on
# KAFKA_PROXIED_PORT but advertises KAFKA_PROXIED_ADVERTISED_PORT, where Toxiproxy
# (scripts/toxiproxy.sh) forwards to it, so a client bootstrapped there keeps going through
# the proxy and can be cut off from Kafka alone.
# Saved with the others: `kafka-start` of a second instance must not fall back to the
# default instance's ports.
KAFKA_PROXIED_PORT="${COURIER_KAFKA_PROXIED_PORT:-${SAVED_COURIER_KAFKA_PROXIED_PORT:-19095}}"
KAFKA_PROXIED_ADVERTISED_PORT="${COURIER_KAFKA_PROXIED_ADVERTISED_PORT:-${SAVED_COURIER_KAFKA_PROXIED_ADVERTISED_PORT:-19096}}"
# TLS listeners (certificates made by `up` with openssl, see tls_ensure): SSL with a required
# client certificate, and SASL_SSL with SCRAM-SHA-256 (the user above), PLAIN (a user in the
# listener's JAAS) and OAUTHBEARER (the broker's default validator of unsecured JWTs: the
# tests' token endpoint issues them). The passwords are test fixtures.
KAFKA_SSL_PORT="${COURIER_KAFKA_SSL_PORT:-${SAVED_COURIER_KAFKA_SSL_PORT:-19097}}"
KAFKA_SASL_SSL_PORT="${COURIER_KAFKA_SASL_SSL_PORT:-${SAVED_COURIER_KAFKA_SASL_SSL_PORT:-19098}}"
PLAIN_PASSWORD=courier-plain-test
TLS_STORE_PASSWORD=courier-keystore-test
CLIENT_KEY_PASSWORD=courier-client-key-test
REDIS_PORT="${COURIER_REDIS_PORT:-${SAVED_COURIER_REDIS_PORT:-16379}}"
REDIS_TLS_PORT="${COURIER_REDIS_TLS_PORT:-${SAVED_COURIER_REDIS_TLS_PORT:-16380}}"
PG_PORT="${COURIER_PG_PORT:-${SAVED_COURIER_PG_PORT:-15432}}"
for _p in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_SASL_PORT" "$KAFKA_PROXIED_PORT" "$KAFKA_PROXIED_ADVERTISED_PORT" \
    "$KAFKA_SSL_PORT" "$KAFKA_SASL_SSL_PORT" "$REDIS_PORT" "$REDIS_TLS_PORT" "$PG_PORT"; do
    [[ $_p =~ ^[0-9]+$ ]] || { echo "[services] ERROR: port '$_p' is not a number" >&2; exit 1; }
done
KAFKA_READY_TIMEOUT="${COURIER_KAFKA_READY_TIMEOUT:-60}"
KAFKA_STOP_TIMEOUT="${COURIER_KAFKA_STOP_TIMEOUT:-30}"
HOST=127.0.0.1

KAFKA_CACHE="$CACHE/kafka-$KAFKA_VERSION"
KAFKA_LIB="$KAFKA_CACHE/lib"
KAFKA_DIR="$STATE/kafka"
KAFKA_DATA="$KAFKA_DIR/data"
KAFKA_PROPS="$KAFKA_DIR/server.properties"
KAFKA_LOG4J="$KAFKA_DIR/log4j2.properties"
KAFKA_LOG="$KAFKA_DIR/kafka.log"
KAFKA_OUT="$KAFKA_DIR/kafka.out"
KAFKA_PID="$KAFKA_DIR/kafka.pid"

REDIS_DIR="$STATE/redis"
REDIS_PID="$REDIS_DIR/redis.pid"
REDIS_LOG="$REDIS_DIR/redis.log"

PG_DIR="$STATE/pg"
PG_DATA="$PG_DIR/data"
PG_SOCK="$PG_DIR/run"
PG_LOG="$PG_DIR/postgres.log"

ENV_FILE="$STATE/services.env"

TLS_DIR="$STATE/tls"

log() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] ERROR: %s\n' "$*" >&2; exit 1; }

usage() {
    sed -n '2,24p' "$SCRIPT_PATH" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# ---------------------------------------------------------------------------------------------
# helpers

# pid_alive PIDFILE PATTERN: the pid in PIDFILE runs, is not a zombie, and its command line
# contains PATTERN (guards against pid reuse).
pid_alive() {
    local pidfile=$1 pattern=$2 pid st
    [[ -s $pidfile ]] || return 1
    pid=$(<"$pidfile")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/stat ]] || return 1
    st=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [[ $st != Z && $st != X ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$pattern"
}

# proc_gone PID: the process has exited. A multi-threaded process (java) shows its main thread
# as a zombie while the other threads still run and hold its sockets: only "zombie with no
# thread left but the main one" counts as gone.
proc_gone() {
    local pid=$1 st
    [[ -r /proc/$pid/stat ]] || return 0
    st=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 0
    [[ -z $st ]] && return 0
    if [[ $st == Z || $st == X ]]; then
        local tasks
        tasks=$(ls "/proc/$pid/task" 2>/dev/null | wc -l) || return 0
        ((tasks <= 1)) && return 0
    fi
    return 1
}

# wait_gone PID SECONDS: wait until PID has exited.
wait_gone() {
    local pid=$1 secs=$2 i
    for ((i = 0; i < secs * 10; i++)); do
        proc_gone "$pid" && return 0
        sleep 0.1
    done
    return 1
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

port_owner() { ss -ltnpH "sport = :$1" 2>/dev/null | head -1 || true; }

# check_port_free PORT WHAT: fail when something listens on PORT (after a short grace period,
# in case a process we just stopped is still letting go of it).
check_port_free() {
    local port=$1 what=$2 i
    for ((i = 0; i < 50; i++)); do
        port_open "$port" || return 0
        sleep 0.1
    done
    local owner; owner=$(port_owner "$port")
    die "$what: port $HOST:$port is already in use by another process${owner:+ ($owner)}. \
Stop it, or pick another port with COURIER_*_PORT."
}

as_root() {
    if [[ $(id -u) -eq 0 ]]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root to run: $*"; fi
}

pg_bin() {
    if [[ -n ${COURIER_PG_BIN:-} ]]; then echo "$COURIER_PG_BIN"; return; fi
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
    echo "${d:-}"
}

java_bin() { echo "${JAVA_HOME:+$JAVA_HOME/bin/}java"; }

# ---------------------------------------------------------------------------------------------
# installation

ensure_packages() {
    local pkgs=()
    command -v redis-server >/dev/null || pkgs+=(redis-server)
    command -v redis-cli >/dev/null || pkgs+=(redis-tools)
    command -v kcat >/dev/null || pkgs+=(kcat)
    command -v openssl >/dev/null || pkgs+=(openssl)
    local pb; pb=$(pg_bin)
    if [[ -z $pb || ! -x $pb/initdb || ! -x $pb/postgres ]] || ! id postgres >/dev/null 2>&1; then
        pkgs+=(postgresql)
    fi
    command -v pg_isready >/dev/null || pkgs+=(postgresql-client)
    command -v "$(java_bin)" >/dev/null || pkgs+=(openjdk-17-jre-headless)
    command -v mvn >/dev/null || pkgs+=(maven)
    # Build dependencies of Courier itself: librdkafka is built with CMake (the
    # rdkafka crate's `cmake-build`: it links the bundled static libcurl for OIDC)
    # and a C/C++ compiler, with OpenSSL (TLS, SASL/SCRAM/OAUTHBEARER) found
    # through pkg-config. zstd and curl are compiled from the crates' sources.
    command -v pkg-config >/dev/null || pkgs+=(pkg-config)
    dpkg -s libssl-dev >/dev/null 2>&1 || pkgs+=(libssl-dev)
    command -v cmake >/dev/null || pkgs+=(cmake)
    command -v c++ >/dev/null || pkgs+=(g++)
    if ((${#pkgs[@]})); then
        log "installing missing packages: ${pkgs[*]}"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null \
            || die "apt-get update failed"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            "${pkgs[@]}" >/dev/null || die "apt-get install ${pkgs[*]} failed"
    fi
    pb=$(pg_bin)
    [[ -n $pb && -x $pb/initdb ]] || die "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin (set COURIER_PG_BIN)"
    id postgres >/dev/null 2>&1 || die "system user 'postgres' does not exist (install the postgresql package)"
    ensure_prometheus
}

prometheus_bins_ok() {
    command -v prometheus >/dev/null && command -v promtool >/dev/null &&
        promtool --version >/dev/null 2>&1
}

# Prometheus and promtool for tests/observability.rs (which starts its own server on a free
# port: nothing is started here). Debian's package tries to start its system service from
# the post-install script; without an init system that can fail and make apt-get/dpkg exit
# non-zero even though the binaries are unpacked. Only missing binaries are fatal.
ensure_prometheus() {
    prometheus_bins_ok && return 0
    local aptlog="$STATE/apt-prometheus.log"
    log "installing missing package: prometheus (its service is not started; tests run their own)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null \
        || die "apt-get update failed"
    if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        prometheus >"$aptlog" 2>&1; then
        if prometheus_bins_ok; then
            log "apt-get install prometheus exited non-zero (most likely its service could not be started here); the binaries are installed, continuing (log: $aptlog)"
        else
            tail -n 30 "$aptlog" >&2 || true
            die "apt-get install prometheus failed (log: $aptlog)"
        fi
    fi
    prometheus_bins_ok || die "prometheus/promtool not found after installing the prometheus package"
}

ensure_kafka_jars() {
    if [[ -f $KAFKA_LIB/.complete ]]; then return 0; fi
    command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
    log "downloading Kafka $KAFKA_VERSION jars from Maven Central into $KAFKA_LIB (first run only)..."
    mkdir -p "$KAFKA_CACHE"
    cat >"$KAFKA_CACHE/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>courier.test</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
    local tmp="$KAFKA_CACHE/lib.tmp.$$"
    rm -rf "$tmp"
    if ! (cd "$KAFKA_CACHE" && mvn -B -q -f pom.xml dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$tmp" >"$KAFKA_CACHE/mvn.log" 2>&1); then
        tail -n 40 "$KAFKA_CACHE/mvn.log" >&2 || true
        rm -rf "$tmp"
        die "mvn dependency:copy-dependencies failed (full log: $KAFKA_CACHE/mvn.log)"
    fi
    ls "$tmp"/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null 2>&1 || die "kafka_2.13-$KAFKA_VERSION.jar missing after mvn"
    touch "$tmp/.complete"
    rm -rf "$KAFKA_LIB"
    mv "$tmp" "$KAFKA_LIB"
    log "kafka jars cached ($(ls "$KAFKA_LIB" | wc -l) files)"
}

# ---------------------------------------------------------------------------------------------
# TLS: one test CA signs the services' certificate (127.0.0.1 and localhost) and a client
# certificate whose key is encrypted; a second CA that signs nothing is the "wrong CA".
# EC P-256 keys: made in milliseconds. Made again when missing or expiring within a day.

tls_cert_ok() { [[ -s $1 ]] && openssl x509 -in "$1" -noout -checkend 86400 >/dev/null 2>&1; }

tls_ensure() {
    if tls_cert_ok "$TLS_DIR/server.pem" && tls_cert_ok "$TLS_DIR/client.pem" \
        && tls_cert_ok "$TLS_DIR/other-ca.pem" && [[ -s $TLS_DIR/kafka.p12 ]]; then
        return 0
    fi
    command -v openssl >/dev/null || die "openssl not found (apt-get install openssl)"
    log "making test certificates in $TLS_DIR"
    local d="$TLS_DIR.tmp.$$"
    rm -rf "$d"
    mkdir -p "$d"
    (
        cd "$d"
        ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
        ec ca.key
        openssl req -x509 -new -key ca.key -sha256 -days 825 -subj "/CN=courier test CA" \
            -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign -out ca.pem
        ec other-ca.key
        openssl req -x509 -new -key other-ca.key -sha256 -days 825 -subj "/CN=courier other CA" \
            -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign -out other-ca.pem
        ec server.key
        openssl req -new -key server.key -subj "/CN=localhost" -out server.csr
        printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" "extendedKeyUsage=serverAuth" \
            "basicConstraints=CA:FALSE" >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -sha256 \
            -extfile server.ext -out server.pem
        ec client.plain.key
        openssl req -new -key client.plain.key -subj "/CN=courier" -out client.csr
        printf '%s\n' "extendedKeyUsage=clientAuth" "basicConstraints=CA:FALSE" >client.ext
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -sha256 \
            -extfile client.ext -out client.pem
        openssl pkcs8 -topk8 -v2 aes-256-cbc -in client.plain.key -passout "pass:$CLIENT_KEY_PASSWORD" -out client.key
        # The broker's keystore (PKCS12: key and chain); its truststore is ca.pem (PEM).
        openssl pkcs12 -export -in server.pem -inkey server.key -certfile ca.pem -name kafka \
            -passout "pass:$TLS_STORE_PASSWORD" -out kafka.p12
        rm -f ./*.csr ./*.ext ./*.srl client.plain.key
    ) >"$d.log" 2>&1 || { cat "$d.log" >&2; rm -rf "$d"; die "making test certificates failed"; }
    rm -f "$d.log"
    chmod 644 "$d"/*.pem "$d"/kafka.p12 "$d"/client.key
    rm -rf "$TLS_DIR"
    mv "$d" "$TLS_DIR"
    chmod 755 "$TLS_DIR"
}

# ---------------------------------------------------------------------------------------------
# kafka

# kafka_config: the broker's server.properties, on stdout.
kafka_config() {
    cat <<EOF
# generated by scripts/services.sh
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT,SASL_PLAINTEXT://$HOST:$KAFKA_SASL_PORT,PROXIED://$HOST:$KAFKA_PROXIED_PORT,SSL://$HOST:$KAFKA_SSL_PORT,SASL_SSL://$HOST:$KAFKA_SASL_SSL_PORT
advertised.listeners=PLAINTEXT://$HOST:$KAFKA_PORT,SASL_PLAINTEXT://$HOST:$KAFKA_SASL_PORT,PROXIED://$HOST:$KAFKA_PROXIED_ADVERTISED_PORT,SSL://$HOST:$KAFKA_SSL_PORT,SASL_SSL://$HOST:$KAFKA_SASL_SSL_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,PROXIED:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-256
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS_DIR/kafka.p12
ssl.keystore.password=$TLS_STORE_PASSWORD
ssl.key.password=$TLS_STORE_PASSWORD
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
listener.name.ssl.ssl.client.auth=required
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-256,PLAIN,OAUTHBEARER
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER="$PLAIN_PASSWORD";
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="broker";
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$KAFKA_DATA
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=false
# Not Kafka's default (4096), so the tests see Courier read the limit from the
# brokers (tests/positions.rs::commit_metadata_stays_within_the_brokers_limit).
offset.metadata.max.bytes=1024
offsets.topic.replication.factor=1
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
# After a SIGKILL the restarted broker cannot register until the dead incarnation's session
# expires (default 9 s): keep that short so kafka-kill + kafka-start is quick.
broker.session.timeout.ms=4000
broker.heartbeat.interval.ms=500
num.network.threads=2
num.io.threads=4
log.cleaner.dedupe.buffer.size=16777216
EOF
}

kafka_write_config() {
    mkdir -p "$KAFKA_DATA"
    kafka_config >"$KAFKA_PROPS"
    cat >"$KAFKA_LOG4J" <<EOF
# generated by scripts/services.sh
status = warn
name = courier-kafka
appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = $KAFKA_LOG
appender.file.filePattern = $KAFKA_LOG.%i
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 100MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 2
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
EOF
}

kafka_java() {
    "$(java_bin)" -Xmx512m -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$KAFKA_LOG4J" -cp "$KAFKA_LIB/*" "$@"
}

kafka_format_if_needed() {
    # The SCRAM user is created at format time: storage formatted before the SASL
    # listener existed is formatted again (test data only).
    if [[ -f $KAFKA_DATA/meta.properties && ! -f $KAFKA_DIR/.scram-v1 ]]; then
        log "Kafka storage predates the SASL listener: formatting it again"
        rm -rf "$KAFKA_DATA"
        mkdir -p "$KAFKA_DATA"
    fi
    [[ -f $KAFKA_DATA/meta.properties ]] && return 0
    log "formatting Kafka storage in $KAFKA_DATA"
    local id
    id=$(kafka_java kafka.tools.StorageTool random-uuid 2>>"$KAFKA_OUT" | tail -1) \
        || die "kafka StorageTool random-uuid failed (see $KAFKA_OUT)"
    [[ -n $id ]] || die "kafka StorageTool random-uuid printed nothing (see $KAFKA_OUT)"
    kafka_java kafka.tools.StorageTool format -t "$id" -c "$KAFKA_PROPS" \
        --add-scram "SCRAM-SHA-256=[name=$SASL_USER,password=$SASL_PASSWORD]" >>"$KAFKA_OUT" 2>&1 \
        || { tail -n 20 "$KAFKA_OUT" >&2; die "kafka storage format failed (see $KAFKA_OUT)"; }
    touch "$KAFKA_DIR/.scram-v1"
}

kafka_running() { pid_alive "$KAFKA_PID" "$KAFKA_PROPS"; }

kafka_metadata_ok() {
    timeout 5 kcat -b "$HOST:$KAFKA_PORT" -L -t __nothing -m 2 >/dev/null 2>&1
}

# kafka_wait_ready LOG_OFFSET: metadata answers AND the log (written after LOG_OFFSET bytes)
# says "Kafka Server started".
kafka_wait_ready() {
    local offset=${1:-0} deadline=$((SECONDS + KAFKA_READY_TIMEOUT)) size started=0
    while ((SECONDS < deadline)); do
        if ! kafka_running; then
            tail -n 50 "$KAFKA_LOG" >&2 2>/dev/null || true
            tail -n 20 "$KAFKA_OUT" >&2 2>/dev/null || true
            die "kafka exited during startup (logs: $KAFKA_LOG, $KAFKA_OUT)"
        fi
        if ((started == 0)) && [[ -f $KAFKA_LOG ]]; then
            size=$(stat -c %s "$KAFKA_LOG")
            ((size < offset)) && offset=0 # rolled over
            # Not `tail | grep -q`: under pipefail, grep -q exiting at the first match
            # makes tail die of SIGPIPE on a long log, and the pipeline "fails".
            grep -q "Kafka Server started" < <(tail -c +"$((offset + 1))" "$KAFKA_LOG") && started=1
        fi
        if ((started)) && kafka_metadata_ok; then
            return 0
        fi
        sleep 0.5
    done
    tail -n 50 "$KAFKA_LOG" >&2 2>/dev/null || true
    die "kafka not ready on $HOST:$KAFKA_PORT after ${KAFKA_READY_TIMEOUT}s (log: $KAFKA_LOG)"
}

# kafka_launch: start the broker in the background unless it runs; sets KAFKA_WAIT_OFFSET
# (-1 when it was already running and healthy, so there is nothing to wait for).
KAFKA_WAIT_OFFSET=0
kafka_launch() {
    # A broker started by an older version of this script (e.g. without the SASL or the
    # PROXIED listener) is restarted with the config this version writes.
    if kafka_running && [[ "$(kafka_config)" != "$(cat "$KAFKA_PROPS" 2>/dev/null)" ]]; then
        log "running kafka's $KAFKA_PROPS differs from the current config: restarting it"
        kafka_stop
    fi
    if kafka_running; then
        if kafka_metadata_ok; then
            log "kafka already running (pid $(<"$KAFKA_PID")) on $HOST:$KAFKA_PORT"
            KAFKA_WAIT_OFFSET=-1
        else
            log "kafka process running (pid $(<"$KAFKA_PID")) but not answering yet; waiting"
            KAFKA_WAIT_OFFSET=0
        fi
        return 0
    fi
    [[ -f $KAFKA_LIB/.complete ]] || die "kafka jars not installed in $KAFKA_LIB: run '$SCRIPT_PATH up'"
    command -v kcat >/dev/null || die "kcat not installed: run '$SCRIPT_PATH up'"
    check_port_free "$KAFKA_PORT" kafka
    check_port_free "$KAFKA_CONTROLLER_PORT" "kafka controller"
    check_port_free "$KAFKA_SASL_PORT" "kafka SASL listener"
    check_port_free "$KAFKA_PROXIED_PORT" "kafka PROXIED listener"
    check_port_free "$KAFKA_SSL_PORT" "kafka SSL listener"
    check_port_free "$KAFKA_SASL_SSL_PORT" "kafka SASL_SSL listener"
    kafka_write_config
    kafka_format_if_needed
    KAFKA_WAIT_OFFSET=0
    [[ -f $KAFKA_LOG ]] && KAFKA_WAIT_OFFSET=$(stat -c %s "$KAFKA_LOG")
    log "starting kafka on $HOST:$KAFKA_PORT (controller $KAFKA_CONTROLLER_PORT)"
    rm -f "$KAFKA_PID"
    # New session: a Ctrl-C in the terminal/test run that called us does not reach the broker.
    # The shell writes its own pid, then execs java, so the pid file is java's pid.
    # GC and safepoint pauses go to gc.log: a test that sees the coordinator answer
    # nothing for seconds (a client-side session timeout) can tell a JVM pause from a
    # starved machine.
    setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$KAFKA_PID" \
        "$(java_bin)" -Xmx512m -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
        "-Xlog:gc,safepoint:file=$KAFKA_DIR/gc.log:time,uptime:filecount=2,filesize=20m" \
        -Dlog4j2.configurationFile="$KAFKA_LOG4J" -cp "$KAFKA_LIB/*" \
        kafka.Kafka "$KAFKA_PROPS" </dev/null >>"$KAFKA_OUT" 2>&1 9>&- &
    local i
    for ((i = 0; i < 50; i++)); do [[ -s $KAFKA_PID ]] && break; sleep 0.1; done
    [[ -s $KAFKA_PID ]] || die "kafka launcher did not write $KAFKA_PID"
}

kafka_wait_launched() {
    ((KAFKA_WAIT_OFFSET >= 0)) || return 0
    kafka_wait_ready "$KAFKA_WAIT_OFFSET"
    log "kafka ready (pid $(<"$KAFKA_PID"))"
}

kafka_start() {
    kafka_launch
    kafka_wait_launched
}

kafka_stop() {
    local sig=${1:-TERM}
    if ! kafka_running; then
        log "kafka not running"
        rm -f "$KAFKA_PID"
        return 0
    fi
    local pid; pid=$(<"$KAFKA_PID")
    log "stopping kafka (pid $pid, SIG$sig)"
    kill -"$sig" "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" "$KAFKA_STOP_TIMEOUT"; then
        log "kafka did not stop within ${KAFKA_STOP_TIMEOUT}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        wait_gone "$pid" 10 || die "kafka (pid $pid) does not die"
    fi
    rm -f "$KAFKA_PID"
}

# Stops Kafka and deletes its storage (formatted again at the next start). The test
# command runs it first: every run creates hundreds of topics, and a broker carrying
# those of all earlier runs (3,070 partitions, 3.4 GB after a day here) took 93-101 s
# to come back in the kafka-restart drill and slowed every group coordinator lookup.
kafka_reset() {
    kafka_stop TERM
    if [[ -d $KAFKA_DATA ]]; then
        log "deleting Kafka's storage in $KAFKA_DATA (topics and groups of earlier runs)"
        rm -rf "$KAFKA_DATA"
    fi
}

# ---------------------------------------------------------------------------------------------
# redis

redis_running() { pid_alive "$REDIS_PID" "redis-server"; }

redis_ping() { [[ $(timeout 3 redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]; }

redis_tls_ping() {
    [[ $(timeout 3 redis-cli -h "$HOST" -p "$REDIS_TLS_PORT" --tls --cacert "$TLS_DIR/ca.pem" ping 2>/dev/null) == PONG ]]
}

redis_start() {
    # A Redis started by an older version of this script has no TLS port: restart it.
    if redis_running && redis_ping && ! redis_tls_ping; then
        log "running redis has no TLS port $REDIS_TLS_PORT: restarting it"
        redis_stop
    fi
    if redis_running && redis_ping; then
        log "redis already running (pid $(<"$REDIS_PID")) on $HOST:$REDIS_PORT (TLS $REDIS_TLS_PORT)"
        return 0
    fi
    command -v redis-server >/dev/null || die "redis-server not installed: run '$SCRIPT_PATH up'"
    if ! redis_running; then
        check_port_free "$REDIS_PORT" redis
        check_port_free "$REDIS_TLS_PORT" "redis TLS"
        mkdir -p "$REDIS_DIR"
        rm -f "$REDIS_PID"
        log "starting redis on $HOST:$REDIS_PORT (TLS $REDIS_TLS_PORT)"
        redis-server --bind "$HOST" --port "$REDIS_PORT" --daemonize yes \
            --tls-port "$REDIS_TLS_PORT" --tls-cert-file "$TLS_DIR/server.pem" \
            --tls-key-file "$TLS_DIR/server.key" --tls-ca-cert-file "$TLS_DIR/ca.pem" \
            --tls-auth-clients no \
            --pidfile "$REDIS_PID" --logfile "$REDIS_LOG" --dir "$REDIS_DIR" \
            --save '' --appendonly no </dev/null >/dev/null 2>&1 9>&- \
            || { tail -n 20 "$REDIS_LOG" >&2 2>/dev/null || true; die "redis-server failed to start (log: $REDIS_LOG)"; }
    fi
    local i
    for ((i = 0; i < 100; i++)); do
        redis_ping && redis_tls_ping && { log "redis ready (pid $(<"$REDIS_PID"))"; return 0; }
        sleep 0.1
    done
    tail -n 20 "$REDIS_LOG" >&2 2>/dev/null || true
    die "redis not answering PING on $HOST:$REDIS_PORT after 10s (log: $REDIS_LOG)"
}

redis_stop() {
    if ! redis_running; then
        log "redis not running"
        rm -f "$REDIS_PID"
        return 0
    fi
    local pid; pid=$(<"$REDIS_PID")
    log "stopping redis (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" 10; then
        kill -KILL "$pid" 2>/dev/null || true
        wait_gone "$pid" 5 || die "redis (pid $pid) does not die"
    fi
    rm -f "$REDIS_PID"
}

# ---------------------------------------------------------------------------------------------
# postgres

as_pg() { runuser -u postgres -- "$@"; }

pg_prepare_dirs() {
    mkdir -p "$PG_DIR" "$PG_SOCK"
    chown postgres:postgres "$PG_DIR" "$PG_SOCK"
    as_pg test -w "$PG_DIR" ||
        die "user 'postgres' cannot write $PG_DIR (a parent directory is not traversable?): set COURIER_STATE to a path under /tmp"
}

# The postmaster runs when the pid on the first line of postmaster.pid is alive and is a
# postgres for our data dir. A stale postmaster.pid whose pid was reused (machine restarted,
# processes killed) is removed, or postgres would refuse to start.
pg_running() {
    [[ -f $PG_DATA/PG_VERSION ]] || return 1
    [[ -f $PG_DATA/postmaster.pid ]] || return 1
    local pid
    pid=$(head -1 "$PG_DATA/postmaster.pid" 2>/dev/null || true)
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    if ! proc_gone "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$PG_DATA"; then
        return 0
    fi
    log "removing stale $PG_DATA/postmaster.pid (pid $pid is not our postgres)"
    rm -f "$PG_DATA/postmaster.pid"
    return 1
}

pg_ready() { pg_isready -q -h "$HOST" -p "$PG_PORT" -U postgres -d postgres -t 2 >/dev/null 2>&1; }

pg_psql() {
    as_pg "$(pg_bin)/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_SOCK" -p "$PG_PORT" -U postgres -d postgres "$@"
}

pg_initdb_if_needed() {
    local pb; pb=$(pg_bin)
    if [[ -f $PG_DATA/PG_VERSION ]]; then
        local have want
        have=$(<"$PG_DATA/PG_VERSION")
        want=$("$pb/postgres" --version | sed -E 's/.* ([0-9]+)(\.[0-9]+)*.*/\1/')
        [[ $have == "$want" ]] || die "$PG_DATA was created by PostgreSQL $have but $pb is $want: run '$SCRIPT_PATH clean' first"
        return 0
    fi
    log "initdb PostgreSQL in $PG_DATA"
    rm -rf "$PG_DATA"
    as_pg "$pb/initdb" -D "$PG_DATA" -A trust -U postgres -E UTF8 --locale=C -N >"$PG_DIR/initdb.log" 2>&1 \
        || { tail -n 20 "$PG_DIR/initdb.log" >&2; die "initdb failed (log: $PG_DIR/initdb.log)"; }
    cat >>"$PG_DATA/postgresql.conf" <<EOF

# added by scripts/services.sh (test instance: speed over durability)
listen_addresses = '$HOST'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
EOF
}

pg_start() {
    local pb; pb=$(pg_bin)
    [[ -n $pb && -x $pb/pg_ctl ]] || die "PostgreSQL not installed: run '$SCRIPT_PATH up'"
    pg_prepare_dirs
    pg_initdb_if_needed
    # The server's certificate and key, owned by postgres (it refuses a key others can read).
    install -o postgres -g postgres -m 644 "$TLS_DIR/server.pem" "$PG_DIR/server.pem"
    install -o postgres -g postgres -m 600 "$TLS_DIR/server.key" "$PG_DIR/server.key"
    # A PostgreSQL started by an older version of this script runs without TLS: restart it.
    if pg_running && pg_ready && [[ $(pg_psql -tAc "SHOW ssl" 2>/dev/null) != on ]]; then
        log "running postgres has ssl = off: restarting it"
        pg_stop
    fi
    if pg_running; then
        if pg_ready; then
            log "postgres already running on $HOST:$PG_PORT"
        else
            log "postgres running but not ready yet; waiting"
        fi
    else
        check_port_free "$PG_PORT" postgres
        log "starting postgres on $HOST:$PG_PORT"
        as_pg "$pb/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t 60 \
            -o "-p $PG_PORT -k $PG_SOCK -c listen_addresses=$HOST -c ssl=on -c ssl_cert_file=$PG_DIR/server.pem -c ssl_key_file=$PG_DIR/server.key" \
            start >/dev/null 9>&- \
            || { tail -n 30 "$PG_LOG" >&2 2>/dev/null || true; die "postgres failed to start (log: $PG_LOG)"; }
    fi
    local i
    for ((i = 0; i < 300; i++)); do
        pg_ready && break
        sleep 0.2
    done
    pg_ready || { tail -n 30 "$PG_LOG" >&2 2>/dev/null || true; die "postgres not ready on $HOST:$PG_PORT after 60s (log: $PG_LOG)"; }
    log "postgres ready"
}

pg_ensure_db() {
    if [[ $(pg_psql -tAc "SELECT 1 FROM pg_roles WHERE rolname='courier'") != 1 ]]; then
        log "creating role courier"
        pg_psql -c "CREATE ROLE courier LOGIN PASSWORD 'courier'"
    fi
    if [[ $(pg_psql -tAc "SELECT 1 FROM pg_database WHERE datname='courier'") != 1 ]]; then
        log "creating database courier"
        pg_psql -c "CREATE DATABASE courier OWNER courier"
    fi
}

pg_stop() {
    if ! pg_running; then
        log "postgres not running"
        return 0
    fi
    log "stopping postgres"
    as_pg "$(pg_bin)/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >/dev/null \
        || die "pg_ctl stop failed (log: $PG_LOG)"
}

# ---------------------------------------------------------------------------------------------
# top level

write_env() {
    local tmp="$ENV_FILE.tmp.$$"
    cat >"$tmp" <<EOF
# generated by $SCRIPT_PATH up
export COURIER_TEST_BROKERS=$HOST:$KAFKA_PORT
export COURIER_TEST_SASL_BROKERS=$HOST:$KAFKA_SASL_PORT
export COURIER_TEST_PROXIED_BROKERS=$HOST:$KAFKA_PROXIED_ADVERTISED_PORT
export COURIER_TEST_SASL_USER=$SASL_USER
export COURIER_TEST_SASL_PASSWORD=$SASL_PASSWORD
export COURIER_TEST_REDIS_URL=redis://$HOST:$REDIS_PORT
export COURIER_TEST_PG_URL=postgres://courier:courier@$HOST:$PG_PORT/courier
export COURIER_TEST_TLS_CA=$TLS_DIR/ca.pem
export COURIER_TEST_TLS_OTHER_CA=$TLS_DIR/other-ca.pem
export COURIER_TEST_TLS_SERVER_CERT=$TLS_DIR/server.pem
export COURIER_TEST_TLS_SERVER_KEY=$TLS_DIR/server.key
export COURIER_TEST_SSL_BROKERS=$HOST:$KAFKA_SSL_PORT
export COURIER_TEST_SASL_SSL_BROKERS=$HOST:$KAFKA_SASL_SSL_PORT
export COURIER_TEST_TLS_CLIENT_CERT=$TLS_DIR/client.pem
export COURIER_TEST_TLS_CLIENT_KEY=$TLS_DIR/client.key
export COURIER_TEST_TLS_CLIENT_KEY_PASSWORD=$CLIENT_KEY_PASSWORD
export COURIER_TEST_SASL_PLAIN_PASSWORD=$PLAIN_PASSWORD
export COURIER_TEST_REDIS_TLS_URL=rediss://$HOST:$REDIS_TLS_PORT
export COURIER_TEST_SERVICES=$SCRIPT_PATH
export COURIER_STATE=$STATE
export COURIER_KAFKA_PORT=$KAFKA_PORT
export COURIER_KAFKA_CONTROLLER_PORT=$KAFKA_CONTROLLER_PORT
export COURIER_KAFKA_SASL_PORT=$KAFKA_SASL_PORT
export COURIER_KAFKA_PROXIED_PORT=$KAFKA_PROXIED_PORT
export COURIER_KAFKA_PROXIED_ADVERTISED_PORT=$KAFKA_PROXIED_ADVERTISED_PORT
export COURIER_KAFKA_SSL_PORT=$KAFKA_SSL_PORT
export COURIER_KAFKA_SASL_SSL_PORT=$KAFKA_SASL_SSL_PORT
export COURIER_REDIS_PORT=$REDIS_PORT
export COURIER_REDIS_TLS_PORT=$REDIS_TLS_PORT
export COURIER_PG_PORT=$PG_PORT
export COURIER_TEST_PROMETHEUS=$(command -v prometheus)
export COURIER_TEST_PROMTOOL=$(command -v promtool)
EOF
    mv "$tmp" "$ENV_FILE"
    log "wrote $ENV_FILE (source it: . $ENV_FILE)"
}

cmd_up() {
    local t0=$SECONDS
    if [[ -f $PORTS_FILE ]] && { kafka_running || redis_running || pg_running; }; then
        local saved
        saved=$(grep -E '^COURIER_(KAFKA|KAFKA_CONTROLLER|REDIS|PG)_PORT=' "$PORTS_FILE" | sort | tr '\n' ' ')
        local want
        want=$(printf '%s\n' "COURIER_KAFKA_PORT=$KAFKA_PORT" "COURIER_KAFKA_CONTROLLER_PORT=$KAFKA_CONTROLLER_PORT" \
            "COURIER_REDIS_PORT=$REDIS_PORT" "COURIER_PG_PORT=$PG_PORT" | sort | tr '\n' ' ')
        [[ $saved == "$want" ]] || die "services in $STATE are running with other ports ($saved): run '$SCRIPT_PATH down' first"
    fi
    printf '%s\n' "COURIER_KAFKA_PORT=$KAFKA_PORT" "COURIER_KAFKA_CONTROLLER_PORT=$KAFKA_CONTROLLER_PORT" \
        "COURIER_KAFKA_SASL_PORT=$KAFKA_SASL_PORT" "COURIER_KAFKA_SSL_PORT=$KAFKA_SSL_PORT" \
        "COURIER_KAFKA_SASL_SSL_PORT=$KAFKA_SASL_SSL_PORT" "COURIER_REDIS_TLS_PORT=$REDIS_TLS_PORT" \
        "COURIER_KAFKA_PROXIED_PORT=$KAFKA_PROXIED_PORT" \
        "COURIER_KAFKA_PROXIED_ADVERTISED_PORT=$KAFKA_PROXIED_ADVERTISED_PORT" \
        "COURIER_REDIS_PORT=$REDIS_PORT" "COURIER_PG_PORT=$PG_PORT" >"$PORTS_FILE"
    ensure_packages
    ensure_kafka_jars
    tls_ensure
    # Kafka's JVM start is the slow part: launch it first, start the others while it boots.
    kafka_launch
    redis_start
    pg_start
    pg_ensure_db
    kafka_wait_launched
    write_env
    log "all services up ($((SECONDS - t0))s)"
}

cmd_down() {
    local rc=0
    kafka_stop || rc=1
    redis_stop || rc=1
    if [[ -n $(pg_bin) ]]; then pg_stop || rc=1; fi
    rm -f "$ENV_FILE"
    return $rc
}

cmd_status() {
    local rc=0
    if kafka_running; then
        if kafka_metadata_ok; then echo "kafka     running  pid $(<"$KAFKA_PID")  $HOST:$KAFKA_PORT  healthy"
        else echo "kafka     running  pid $(<"$KAFKA_PID")  $HOST:$KAFKA_PORT  NOT answering metadata"; rc=1; fi
    else echo "kafka     stopped"; rc=1; fi
    if redis_running; then
        if redis_ping; then echo "redis     running  pid $(<"$REDIS_PID")  $HOST:$REDIS_PORT  healthy"
        else echo "redis     running  pid $(<"$REDIS_PID")  $HOST:$REDIS_PORT  NOT answering PING"; rc=1; fi
    else echo "redis     stopped"; rc=1; fi
    if [[ -n $(pg_bin) ]] && pg_running; then
        local pid; pid=$(head -1 "$PG_DATA/postmaster.pid" 2>/dev/null || echo '?')
        if pg_ready; then echo "postgres  running  pid $pid  $HOST:$PG_PORT  healthy"
        else echo "postgres  running  pid $pid  $HOST:$PG_PORT  NOT ready"; rc=1; fi
    else echo "postgres  stopped"; rc=1; fi
    echo "state: $STATE   cache: $CACHE"
    [[ -f $ENV_FILE ]] && echo "env:   $ENV_FILE"
    return $rc
}

cmd_clean() {
    cmd_down
    if [[ -d $STATE ]]; then
        [[ -f $STATE/.courier-services ]] || die "$STATE does not look like a courier state dir (no .courier-services marker); not removing"
        log "removing $STATE"
        rm -rf "$STATE"
    fi
}

main() {
    local cmd=${1:-}
    [[ -n $cmd ]] || usage
    case $cmd in
        up | down | status | clean | kafka-stop | kafka-start | kafka-kill | kafka-reset | redis-stop | redis-start | pg-stop | pg-start) ;;
        -h | --help | help) usage ;;
        *) printf '[services] unknown command: %s\n' "$cmd" >&2; usage ;;
    esac

    if [[ $cmd == status ]]; then
        cmd_status
        return
    fi

    mkdir -p "$STATE"
    chmod 755 "$STATE"
    touch "$STATE/.courier-services"
    # Serialise concurrent invocations (tests may call stop/start from several threads).
    # Every daemon is started with fd 9 closed so it does not inherit the lock.
    exec 9>"$STATE/.lock"
    flock -w 300 9 || die "another services.sh holds $STATE/.lock for over 300s"

    case $cmd in
        up) cmd_up ;;
        down) cmd_down ;;
        clean) cmd_clean ;;
        kafka-start) kafka_start ;;
        kafka-stop) kafka_stop TERM ;;
        kafka-kill) kafka_stop KILL ;;
        kafka-reset) kafka_reset ;;
        redis-start) redis_start ;;
        redis-stop) redis_stop ;;
        pg-start) pg_start ;;
        pg-stop) pg_stop ;;
    esac
}

main "$@"
