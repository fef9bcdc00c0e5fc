#!/usr/bin/env bash
# Idempotent development/test environment set-up for metaq-py on Debian 12.
#
# 1. System packages (root only, via apt-get, each only when missing):
#      python3 + python3-venv   when `python3 -m venv` cannot work
#      default-jre-headless     when `java` is missing (ZooKeeper and pyspark need Java 17+)
#      zookeeper                when Debian's zookeeper package is not installed
#      chromium                 when `chromium` is missing (the dashboard's browser test;
#                               not with --broker-only)
#      libisal-dev              when ISA-L is missing (the slave's record check in C links
#                               it, and every install builds that check when ISA-L is
#                               there; not with --broker-only)
#    `apt-get update` runs only when a package has no install candidate yet.
#    Not root and something missing: prints the exact command and exits 1.
# 2. <checkout>/.venv: created when absent, reused when present.
# 3. pip install -e '.[test,spark]' --config-settings editable_mode=compat into it (with
#    --broker-only: -e . alone, what the broker and the client need; no PySpark, pyarrow,
#    pandas or test tools), skipped while the install command, setup.cfg, pyproject.toml,
#    setup.py, the C sources under meta/ and the checkout path are unchanged since the last
#    successful install and the install is still path-based (--force reinstalls).
#    --broker-only is also satisfied by a full install, so `start local` after `tools/test`
#    installs nothing. The install builds the two C extensions in place when it can (the
#    group-commit flusher's C thread; the slave's record check, with ISA-L), else goes on
#    without them (setup.py); the last lines say which the broker will run.
#    Why compat: setuptools' default editable mode serves a flat layout through an import
#    finder, and PySpark finds Python data sources with pkgutil.iter_modules(), which lists
#    only sys.path directories. compat puts the checkout on sys.path with a plain .pth line,
#    so PySpark lists pyspark_metaq and spark.read.format("metaq") works without
#    meta.spark.register(spark), on the driver and in every worker started from this venv.
#    setuptools calls compat transitional; a release without it fails the install, and a
#    mode that is not path-based fails the pkgutil check after it: either way, loudly.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.metaq-install-stamp"
PYTHON="${PYTHON:-python3}"
ZOOKEEPER_JAR=/usr/share/java/zookeeper.jar
FORCE=0
BROKER_ONLY=0
# Every argument of the install; the stamp covers them, so changing them reinstalls.
FULL_ARGS=(-e '.[test,spark]' --config-settings editable_mode=compat)
BROKER_ARGS=(-e . --config-settings editable_mode=compat)

usage() {
    cat <<EOF
usage: tools/setup-env.sh [--broker-only] [--force] [--help]

Installs what metaq-py needs to run and test, and is safe to run again:
  - as root, with apt-get, only what is missing: python3 python3-venv, default-jre-headless
    (Java for ZooKeeper and pyspark), zookeeper (Debian's ZooKeeper server package),
    chromium (the dashboard's browser test; not with --broker-only), libisal-dev (ISA-L,
    for the slave's record check in C; not with --broker-only);
  - a virtualenv at $VENV (reused when present);
  - pip install -e '.[test,spark]' --config-settings editable_mode=compat (package, test
    tools and the spark extra) into it; the compat mode adds the checkout to sys.path with a
    .pth file, so PySpark's lookup of pyspark_* modules finds the metaq data source.

  --broker-only  install only what the broker and the client need (pip install -e .): no
                 PySpark, pyarrow, pandas or test tools ('tools/metaServer.sh start local'
                 uses it); an existing full install is kept as it is
  --force        reinstall the Python packages even if nothing changed
  --help         show this help

Environment: PYTHON (interpreter used to create the venv, default python3).
EOF
}

say() { printf 'setup-env: %s\n' "$*"; }
die() { printf 'setup-env: error: %s\n' "$*" >&2; exit 1; }

for arg in "$@"; do
    case "$arg" in
        -h|--help) usage; exit 0 ;;
        --force) FORCE=1 ;;
        --broker-only) BROKER_ONLY=1 ;;
        *) usage >&2; die "unknown argument: $arg" ;;
    esac
done

# --- 1. system packages ---------------------------------------------------------------

python_ok() {
    command -v "$PYTHON" >/dev/null 2>&1 &&
        "$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null
}

missing=()
if [ ! -x "$VENV/bin/python" ]; then
    if ! python_ok; then
        missing+=(python3 python3-venv)
    elif ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
        # Debian ships venv's pip bootstrap (ensurepip) separately.
        missing+=(python3-venv)
    fi
fi
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
# Debian's `zookeeper` package: the server jars (libzookeeper-java) plus its scripts and
# /etc/zookeeper. Our own tools start the server from those jars on a loopback port.
{ [ -f "$ZOOKEEPER_JAR" ] && dpkg -s zookeeper >/dev/null 2>&1; } || missing+=(zookeeper)
# Debian's `chromium`: the dashboard's browser test loads every page in it, headless.
[ "$BROKER_ONLY" -eq 1 ] || command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# Debian's `libisal-dev`: the slave's record check in C (meta.compiled.C_EXTENSIONS) links ISA-L.
[ "$BROKER_ONLY" -eq 1 ] || dpkg -s libisal-dev >/dev/null 2>&1 || missing+=(libisal-dev)

if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        die "missing system packages; as root run:
    apt-get update && apt-get install -y --no-install-recommends ${missing[*]}
then run tools/setup-env.sh again."
    fi
    export DEBIAN_FRONTEND=noninteractive
    for package in "${missing[@]}"; do
        # Captured first: with pipefail, `grep -q` closing the pipe early would fail it.
        policy="$(apt-cache policy "$package" 2>/dev/null || true)"
        if ! grep -q 'Candidate: [^(]' <<<"$policy"; then
            say "apt-get update"
            apt-get update -qq || die "apt-get update failed"
            break
        fi
    done
    say "apt-get install ${missing[*]}"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
        die "apt-get install ${missing[*]} failed"
fi

command -v java >/dev/null 2>&1 || die "java is still missing after installation"
[ -f "$ZOOKEEPER_JAR" ] || die "$ZOOKEEPER_JAR is still missing after installation"

# --- 2. virtualenv ----------------------------------------------------------------------

if [ -x "$VENV/bin/python" ]; then
    "$VENV/bin/python" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null ||
        die "$VENV is broken or older than Python 3.11; remove it and run again"
    say "reusing $VENV"
else
    python_ok || die "$PYTHON (Python >= 3.11) not found; set PYTHON=/path/to/python3.11"
    say "creating $VENV"
    "$PYTHON" -m venv "$VENV" || die "could not create $VENV"
fi

# --- 3. Python packages -----------------------------------------------------------------

stamp_value() {
    # Anything that changes what the install would produce; the arguments are the install's.
    # setup.py and the C sources: the install builds the C extensions (meta.compiled.C_EXTENSIONS).
    { printf '%s\n' "$ROOT" "$@"; cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" "$ROOT/setup.py"
        find "$ROOT/meta" -name '*.c' | LC_ALL=C sort | xargs cat; } |
        sha256sum | cut -d' ' -f1
}

spark_lookup_ok() {
    # What PySpark's lookup of data sources does. -I: not the current directory, which would
    # list pyspark_metaq when run from the checkout whatever the install.
    "$VENV/bin/python" -I -c 'import pkgutil, sys
sys.exit(not any(m.name == "pyspark_metaq" for m in pkgutil.iter_modules()))' 2>/dev/null
}

if [ "$BROKER_ONLY" -eq 1 ]; then
    INSTALL_ARGS=("${BROKER_ARGS[@]}")
    imports='import meta, kazoo, twisted'
else
    INSTALL_ARGS=("${FULL_ARGS[@]}")
    imports='import meta, pytest, kazoo, twisted, pyspark'
fi
wanted="$(stamp_value "${INSTALL_ARGS[@]}")"
full="$(stamp_value "${FULL_ARGS[@]}")"
stamped="$(cat "$STAMP" 2>/dev/null || true)"
# A full install also serves --broker-only.
if [ "$FORCE" -eq 0 ] && { [ "$stamped" = "$wanted" ] || [ "$stamped" = "$full" ]; } &&
    "$VENV/bin/python" -c "$imports" 2>/dev/null && spark_lookup_ok; then
    say "python packages up to date"
else
    say "pip install ${INSTALL_ARGS[*]} (this can take a few minutes the first time)"
    rm -f "$STAMP"
    (cd "$ROOT" && "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "${INSTALL_ARGS[@]}") || die "pip install ${INSTALL_ARGS[*]} failed (see the errors above)"
    spark_lookup_ok || die "pkgutil.iter_modules() in $VENV does not list pyspark_metaq, so
    Spark would not find format(\"metaq\") by itself; the install was not path-based"
    printf '%s\n' "$wanted" >"$STAMP"
fi
# The C extensions are optional (setup.py): say what this install got.
say "$("$VENV/bin/python" -c 'import meta.compiled as c
print(f"group-commit flusher: {c.flush_thread()}; slave record check: {c.record_check()}")')"
say "ready: $VENV/bin/python, java $(java -version 2>&1 | head -n1 | cut -d'"' -f2)"
