# A throw-away PostgreSQL server on loopback for the distributed-sweep tests.
#
#   source .ci/postgres.sh      # exports DSE_TEST_POSTGRES_URL=postgresql://dse@127.0.0.1:PORT/dse_test
#
# Installs the Debian `postgresql` package when no server binaries are found (apt-get update
# first), initialises a cluster in $DSE_PG_DIR (default /tmp/dse-postgres) owned by a non-root
# user (initdb refuses root), starts it on 127.0.0.1 on a free port with trust authentication
# for local connections only, and creates the database. Sourcing it twice reuses the running
# server. It never fails the caller: when something is missing it says so and leaves
# DSE_TEST_POSTGRES_URL unset, and the postgres tests skip with that reason.
# A server this sourcing started (not one it reused) is stopped by `dse_pg_stop`, which
# `.ci/run` calls on exit; by hand: pg_ctl -D "$DSE_PG_DIR/data" stop (as the owning user).

_dse_pg_setup() {
    local dir="${DSE_PG_DIR:-/tmp/dse-postgres}"
    local bin user port
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
        if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
            echo "postgres.sh: no PostgreSQL server binaries and no root apt-get to install them" >&2
            return 0
        fi
        echo "postgres.sh: installing postgresql (apt-get)" >&2
        apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1 || {
            echo "postgres.sh: apt-get install postgresql failed" >&2
            return 0
        }
        bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    fi
    if [ "$(id -u)" -eq 0 ]; then
        user=postgres
        id -u "$user" >/dev/null 2>&1 || useradd --system --no-create-home "$user" 2>/dev/null || {
            echo "postgres.sh: cannot create a non-root user for the server" >&2
            return 0
        }
        _dse_pg_run() { runuser -u "$user" -- "$@"; }
    else
        user=$(id -un)
        _dse_pg_run() { "$@"; }
    fi
    mkdir -p "$dir" && chmod 755 "$dir"
    [ "$(id -u)" -eq 0 ] && chown "$user" "$dir"
    # Reuse a server this script started before.
    if [ -f "$dir/port" ] && _dse_pg_run "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        port=$(cat "$dir/port")
    else
        if [ ! -f "$dir/data/PG_VERSION" ]; then
            rm -rf "$dir/data"
            _dse_pg_run "$bin/initdb" -D "$dir/data" -U dse -A trust --no-sync >"$dir/initdb.log" 2>&1 || {
                echo "postgres.sh: initdb failed (see $dir/initdb.log)" >&2
                return 0
            }
        fi
        port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        _dse_pg_run "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
            -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
            start >/dev/null 2>&1 || {
            echo "postgres.sh: the server did not start (see $dir/server.log)" >&2
            return 0
        }
        _DSE_PG_STOP=("$bin/pg_ctl" -D "$dir/data" -m fast -w stop)
        [ "$(id -u)" -eq 0 ] && _DSE_PG_STOP=(runuser -u "$user" -- "${_DSE_PG_STOP[@]}")
        echo "$port" >"$dir/port.tmp" 2>/dev/null || _dse_pg_run sh -c "echo $port > '$dir/port.tmp'"
        mv "$dir/port.tmp" "$dir/port" 2>/dev/null || _dse_pg_run mv "$dir/port.tmp" "$dir/port"
    fi
    "$bin/psql" -h 127.0.0.1 -p "$port" -U dse -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = 'dse_test'" 2>/dev/null | grep -q 1 ||
        "$bin/createdb" -h 127.0.0.1 -p "$port" -U dse dse_test 2>/dev/null || {
        echo "postgres.sh: cannot create database dse_test" >&2
        return 0
    }
    export DSE_TEST_POSTGRES_URL="postgresql://dse@127.0.0.1:$port/dse_test"
    export DSE_PG_DIR="$dir"
    echo "postgres.sh: DSE_TEST_POSTGRES_URL=$DSE_TEST_POSTGRES_URL" >&2
}

# Stops the server only if this sourcing started it (a reused one belongs to whoever started it).
dse_pg_stop() {
    if [ "${#_DSE_PG_STOP[@]}" -gt 0 ]; then
        "${_DSE_PG_STOP[@]}" >/dev/null 2>&1 || echo "postgres.sh: could not stop the server" >&2
        _DSE_PG_STOP=()
    fi
}

_DSE_PG_STOP=()
_dse_pg_setup
unset -f _dse_pg_setup _dse_pg_run
