#!/usr/bin/env bash
# Make sure a PostgreSQL server (initdb, pg_ctl, postgres) is installed for the tests.
#
# The tests start their own throwaway server on loopback (tests/pg_server.py); they only
# need the binaries. On a machine without them this installs Debian's packages when run
# as root, and otherwise fails with the command to run: a missing server is a failure,
# never a skipped test.
set -euo pipefail

have_server() {
    command -v initdb >/dev/null 2>&1 && return 0
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null 2>&1
}

if have_server; then
    exit 0
fi
if [[ "$(id -u)" -ne 0 ]]; then
    echo "ensure-postgres: PostgreSQL is not installed; run: sudo apt-get install -y postgresql postgresql-contrib" >&2
    exit 1
fi
echo "ensure-postgres: installing postgresql and postgresql-contrib"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq postgresql postgresql-contrib >/dev/null
have_server || { echo "ensure-postgres: installed, but initdb is still missing" >&2; exit 1; }
