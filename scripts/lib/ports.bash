# shellcheck shell=bash
# Loopback ports for the services our scripts start (sourced by scripts/test, scripts/k8s-env
# and scripts/bench-peers).
#
# A port is drawn below the kernel's ephemeral range (32768+), so an outgoing connection cannot
# take it between the check and the bind, and nothing may listen on it. That alone still lets two
# scripts running at once (several control planes of one test binary, say) draw the same port and
# both start a server on it: the loser exits on "address already in use", or worse, a health
# check of the loser answers from the winner. So each drawn port is also *reserved*: a file
# $ZLINK_PORTS_DIR/<port> made with noclobber, holding the reserving shell's pid. A reservation
# whose pid is gone (a script killed with SIGKILL) is taken over; release_ports drops this shell's.
# The reservation only keeps our scripts from colliding with each other: a caller must still
# check that its server bound the port (scripts/k8s-env retries on another port if not).
#
# Needs a `die` function from the sourcing script.

ZLINK_PORTS_DIR="${ZLINK_PORTS_DIR:-${TMPDIR:-/tmp}/zlink-ports}"

# Prints a reserved TCP port on 127.0.0.1 that nothing listened on when drawn.
free_port() {
    local port attempt owner
    mkdir -p "$ZLINK_PORTS_DIR" || die "cannot make the port reservation directory $ZLINK_PORTS_DIR"
    for attempt in $(seq 1 200); do
        port=$((20000 + RANDOM % 12000))
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            continue
        fi
        # $$ is the script's own pid, also inside the $(free_port) subshell.
        if (set -o noclobber && printf '%s\n' "$$" >"$ZLINK_PORTS_DIR/$port") 2>/dev/null; then
            printf '%s\n' "$port"
            return 0
        fi
        owner="$(cat "$ZLINK_PORTS_DIR/$port" 2>/dev/null || true)"
        if [[ "$owner" =~ ^[0-9]+$ ]] && ! kill -0 "$owner" 2>/dev/null; then
            rm -f "$ZLINK_PORTS_DIR/$port"
        fi
    done
    die "no free loopback port found after $attempt attempts"
}

# Drops every reservation this script made.
release_ports() {
    local file
    [[ -d "$ZLINK_PORTS_DIR" ]] || return 0
    for file in "$ZLINK_PORTS_DIR"/*; do
        [[ -f "$file" ]] || continue
        if [[ "$(cat "$file" 2>/dev/null || true)" == "$$" ]]; then
            rm -f "$file"
        fi
    done
}
