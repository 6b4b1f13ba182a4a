#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# devstack/plugin.sh - devstack plugin for ringfleet.
#
# Enable it in local.conf with
#     enable_plugin ringfleet <git URL of ringfleet> [branch]
# (devstack/README.rst has a complete local.conf). devstack sources this file
# once per phase, with the phase as arguments, after devstack/settings.
# The plugin contract: https://docs.openstack.org/devstack/latest/plugins.html
#
# What it does: installs ringfleet from the checkout (setup_develop: pip
# install -e), writes /etc/ringfleet/ringfleet.conf for devstack's RabbitMQ,
# database and etcd3, creates the schema with ringfleet-dbsync, and runs the
# conductor and RINGFLEET_AGENTS compute agents under systemd with run_process
# (units devstack@ringfleet-conductor and devstack@ringfleet-agent-N).

# Console scripts go where devstack's pip installs them (its global virtualenv,
# or /usr/local/bin).
RINGFLEET_BIN_DIR=${RINGFLEET_BIN_DIR:-$(get_python_exec_prefix)}


# Helpers
# -------

# A host for a URL: an IPv6 literal needs brackets.
function _ringfleet_url_host {
    local host=$1
    if [[ "$host" == *:* && "$host" != \[* ]]; then
        host="[$host]"
    fi
    echo "$host"
}

# The tooz URL of the membership group: RINGFLEET_COORDINATION_URL, else
# devstack's Redis (RINGFLEET_COORDINATION=redis), else this node's etcd
# gateway (RINGFLEET_ETCD_GATEWAY), else devstack's etcd3 (on this node, or on
# the controller for a subnode).
function _ringfleet_coordination_url {
    if [[ -n "$RINGFLEET_COORDINATION_URL" ]]; then
        echo "$RINGFLEET_COORDINATION_URL"
        return
    fi
    local host
    if [[ "$RINGFLEET_COORDINATION" == redis ]]; then
        # devstack's Redis (REDIS_HOST, REDIS_PORT, REDIS_PASSWORD as its
        # redis service sets them), on the controller for a subnode.
        host=$(_ringfleet_url_host "${REDIS_HOST:-$SERVICE_HOST}")
        echo "redis://${REDIS_PASSWORD:+:$REDIS_PASSWORD@}$host:${REDIS_PORT:-6379}?membership_timeout=$RINGFLEET_MEMBERSHIP_TIMEOUT"
        return
    fi
    if is_service_enabled ringfleet-etcd-gateway; then
        echo "etcd3+http://127.0.0.1:$RINGFLEET_ETCD_GATEWAY_PORT?membership_timeout=$RINGFLEET_MEMBERSHIP_TIMEOUT"
        return
    fi
    host=$(_ringfleet_url_host "${ETCD_HOST:-$SERVICE_HOST}")
    echo "etcd3+http://$host:${ETCD_PORT:-2379}?membership_timeout=$RINGFLEET_MEMBERSHIP_TIMEOUT"
}

# The etcd members the gateway forwards to: RINGFLEET_ETCD_ENDPOINTS, else
# devstack's etcd3.
function _ringfleet_etcd_endpoints {
    if [[ -n "$RINGFLEET_ETCD_ENDPOINTS" ]]; then
        echo "$RINGFLEET_ETCD_ENDPOINTS"
        return
    fi
    echo "$(_ringfleet_url_host "${ETCD_HOST:-$SERVICE_HOST}"):${ETCD_PORT:-2379}"
}

# The etcd binary that runs the gateway.
function _ringfleet_etcd_bin {
    if [[ -n "$RINGFLEET_ETCD_BIN" ]]; then
        echo "$RINGFLEET_ETCD_BIN"
    elif [[ -x "${ETCD_BIN_DIR:-/nonexistent}/etcd" ]]; then
        echo "$ETCD_BIN_DIR/etcd"
    else
        command -v etcd || die $LINENO "the etcd gateway needs the etcd binary: set RINGFLEET_ETCD_BIN"
    fi
}

function _ringfleet_agent_conf {
    echo "$RINGFLEET_CONF_DIR/agent-$1.conf"
}

# Numbers of the agents to stop: 1..RINGFLEET_AGENTS, and any other agent a
# previous run configured (RINGFLEET_AGENTS may have been lowered since).
function _ringfleet_configured_agents {
    local i conf
    {
        for ((i = 1; i <= RINGFLEET_AGENTS; i++)); do
            echo "$i"
        done
        for conf in "$RINGFLEET_CONF_DIR"/agent-*.conf; do
            [[ -e "$conf" ]] || continue
            i=${conf##*/agent-}
            i=${i%.conf}
            if [[ "$i" =~ ^[0-9]+$ ]]; then
                echo "$i"
            fi
        done
    } | sort -n -u
}


# Entry points
# ------------

# install_ringfleet - pip install -e the checkout (and its requirements,
# within devstack's upper constraints).
function install_ringfleet {
    if ! "${PYTHON:-python3}" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        die $LINENO "ringfleet needs Python 3.11 or newer; set PYTHON3_VERSION in local.conf"
    fi
    local extras=''
    if is_service_enabled ringfleet-api; then
        # gunicorn to serve it, keystonemiddleware for Keystone tokens.
        extras=api-server,keystone
    fi
    if [[ "$RINGFLEET_COORDINATION" == redis ]]; then
        extras=${extras:+$extras,}redis # redis-py, for tooz's Redis driver
    fi
    if [[ -n "$extras" ]]; then
        setup_develop "$RINGFLEET_DIR" "$extras"
    else
        setup_develop "$RINGFLEET_DIR"
    fi
}

# configure_ringfleet - write ringfleet.conf and one agent-N.conf per agent.
function configure_ringfleet {
    if ! [[ "$RINGFLEET_MEMBERSHIP_TIMEOUT" =~ ^[0-9]+$ ]]; then
        die $LINENO "RINGFLEET_MEMBERSHIP_TIMEOUT must be whole seconds, got '$RINGFLEET_MEMBERSHIP_TIMEOUT'"
    fi
    if [[ "$RINGFLEET_COORDINATION" == redis ]] && is_service_enabled ringfleet-etcd-gateway; then
        die $LINENO "set RINGFLEET_COORDINATION=redis or RINGFLEET_ETCD_GATEWAY, not both"
    fi
    if [[ -z "$RINGFLEET_COORDINATION_URL" && "$RINGFLEET_COORDINATION" == etcd ]] \
            && ! is_service_enabled etcd3 \
            && [[ -z "$RINGFLEET_ETCD_ENDPOINTS" && "$SERVICE_HOST" == "$HOST_IP" ]]; then
        die $LINENO "ringfleet needs etcd: enable the etcd3 service or set RINGFLEET_COORDINATION_URL"
    fi
    if is_service_enabled ringfleet-etcd-gateway; then
        if [[ -n "$RINGFLEET_COORDINATION_URL" ]]; then
            die $LINENO "set RINGFLEET_ETCD_GATEWAY or RINGFLEET_COORDINATION_URL, not both"
        fi
        if ! [[ "$RINGFLEET_ETCD_GATEWAY_PORT" =~ ^[0-9]+$ ]]; then
            die $LINENO "RINGFLEET_ETCD_GATEWAY_PORT must be a port number, got '$RINGFLEET_ETCD_GATEWAY_PORT'"
        fi
    fi
    local transport_url
    transport_url=$(get_transport_url)
    if [[ -z "$transport_url" ]]; then
        die $LINENO "ringfleet needs RabbitMQ: enable the rabbit service"
    fi

    sudo install -d -o "$STACK_USER" -m 0755 "$RINGFLEET_CONF_DIR"
    sudo install -d -o "$STACK_USER" -m 0750 "$RINGFLEET_STATE_DIR"
    rm -f "$RINGFLEET_CONF" "$RINGFLEET_CONF_DIR"/agent-*.conf

    iniset "$RINGFLEET_CONF" DEFAULT debug "$ENABLE_DEBUG_LOG_LEVEL"
    iniset "$RINGFLEET_CONF" DEFAULT transport_url "$transport_url"
    iniset "$RINGFLEET_CONF" coordination backend_url "$(_ringfleet_coordination_url)"
    if is_service_enabled ringfleet-conductor; then
        # Only the conductors use the database; agent-only subnodes need none.
        iniset "$RINGFLEET_CONF" database connection "$(database_connection_url ringfleet)"
    fi
    iniset "$RINGFLEET_CONF" compute_agent driver "$RINGFLEET_DRIVER"
    if [[ "$RINGFLEET_DRIVER" == "simulated" ]]; then
        # One JSON line per simulated action, shared by this node's agents.
        iniset "$RINGFLEET_CONF" simulated_driver action_log "$RINGFLEET_STATE_DIR/actions.jsonl"
    fi

    if is_service_enabled ringfleet-api; then
        _ringfleet_configure_api
    fi
    if [[ "$RINGFLEET_PLACEMENT" == True ]]; then
        _ringfleet_configure_placement
    fi

    # Each agent: the shared file plus its own, which names it in the fleet
    # (unique and stable: its pinned nodes are found again by this name).
    local i
    for ((i = 1; i <= RINGFLEET_AGENTS; i++)); do
        iniset "$(_ringfleet_agent_conf "$i")" DEFAULT host "$RINGFLEET_AGENT_HOST_PREFIX-$i"
    done
}

# The [api] group: Keystone tokens when keystone runs here, else noauth on
# 127.0.0.1 only (a devstack without Keystone is a private test host).
function _ringfleet_configure_api {
    if is_service_enabled keystone; then
        iniset "$RINGFLEET_CONF" api auth_strategy keystone
        create_service_user ringfleet
        configure_keystone_authtoken_middleware "$RINGFLEET_CONF" ringfleet
    else
        iniset "$RINGFLEET_CONF" api auth_strategy noauth
    fi
}

# The [placement] group: the agents report their nodes to devstack's
# Placement as the ringfleet service user, which Placement's default policy
# wants an admin.
function _ringfleet_configure_placement {
    create_service_user ringfleet admin
    iniset "$RINGFLEET_CONF" placement auth_type password
    iniset "$RINGFLEET_CONF" placement auth_url "$KEYSTONE_SERVICE_URI"
    iniset "$RINGFLEET_CONF" placement username ringfleet
    iniset "$RINGFLEET_CONF" placement password "$SERVICE_PASSWORD"
    iniset "$RINGFLEET_CONF" placement user_domain_name "$SERVICE_DOMAIN_NAME"
    iniset "$RINGFLEET_CONF" placement project_name "$SERVICE_PROJECT_NAME"
    iniset "$RINGFLEET_CONF" placement project_domain_name "$SERVICE_DOMAIN_NAME"
    iniset "$RINGFLEET_CONF" placement region_name "$REGION_NAME"
}

# The address ringfleet-api listens on (see _ringfleet_configure_api).
function _ringfleet_api_bind {
    if is_service_enabled keystone; then
        echo "$(_ringfleet_url_host "$RINGFLEET_API_HOST"):$RINGFLEET_API_PORT"
    else
        echo "127.0.0.1:$RINGFLEET_API_PORT"
    fi
}

# init_ringfleet - create the database and bring the schema to the newest
# version (on the node that runs the conductor).
function init_ringfleet {
    recreate_database ringfleet
    "$RINGFLEET_BIN_DIR/ringfleet-dbsync" --config-file "$RINGFLEET_CONF" upgrade \
        || die $LINENO "ringfleet-dbsync upgrade failed"
}

# start_ringfleet - the etcd gateway (if enabled), the conductor, then the
# agents (each agent retries its calls until the conductor answers, so no wait
# is needed in between).
# run_process starts only the services that are enabled.
function start_ringfleet {
    # The etcd gateway first: the services' backend_url is this node's gateway.
    if is_service_enabled ringfleet-etcd-gateway; then
        run_process ringfleet-etcd-gateway \
            "$(_ringfleet_etcd_bin) gateway start --endpoints=$(_ringfleet_etcd_endpoints) --listen-addr=127.0.0.1:$RINGFLEET_ETCD_GATEWAY_PORT"
    fi
    run_process ringfleet-conductor \
        "$RINGFLEET_BIN_DIR/ringfleet-conductor --config-file $RINGFLEET_CONF"
    # The HTTP API under gunicorn (docs/http-api.rst), as etc/systemd's unit.
    run_process ringfleet-api \
        "env RINGFLEET_API_CONFIG=$RINGFLEET_CONF $RINGFLEET_BIN_DIR/gunicorn --workers $RINGFLEET_API_WORKERS --threads 8 --worker-class gthread --no-control-socket --bind $(_ringfleet_api_bind) conductor.api.wsgi:init_application()"
    local i
    for ((i = 1; i <= RINGFLEET_AGENTS; i++)); do
        run_process "ringfleet-agent-$i" \
            "$RINGFLEET_BIN_DIR/ringfleet-compute-agent --config-file $RINGFLEET_CONF --config-file $(_ringfleet_agent_conf "$i")"
    done
}

# stop_ringfleet - the agents first (a stopping agent still reports to the
# conductor), then the conductor, then the etcd gateway (a stopping agent
# leaves the group through it). stop_process acts on enabled services only,
# so an agent left over from a larger RINGFLEET_AGENTS is enabled first.
function stop_ringfleet {
    local i
    for i in $(_ringfleet_configured_agents); do
        enable_service "ringfleet-agent-$i"
        stop_process "ringfleet-agent-$i"
    done
    stop_process ringfleet-api
    stop_process ringfleet-conductor
    stop_process ringfleet-etcd-gateway
}

# cleanup_ringfleet - remove what configure_ringfleet created.
function cleanup_ringfleet {
    sudo rm -rf "$RINGFLEET_CONF_DIR" "$RINGFLEET_STATE_DIR"
}


# Dispatch
# --------

if is_service_enabled ringfleet-conductor ringfleet-agent; then
    if [[ "$1" == "stack" && "$2" == "install" ]]; then
        # After devstack installed its own projects and their dependencies.
        echo_summary "Installing ringfleet"
        install_ringfleet

    elif [[ "$1" == "stack" && "$2" == "post-config" ]]; then
        # The servers (database, RabbitMQ, etcd) are configured: write ours.
        echo_summary "Configuring ringfleet"
        configure_ringfleet

    elif [[ "$1" == "stack" && "$2" == "extra" ]]; then
        # The servers run: create the schema, start the services.
        if is_service_enabled ringfleet-conductor; then
            echo_summary "Initializing the ringfleet database"
            init_ringfleet
        fi
        echo_summary "Starting ringfleet"
        start_ringfleet
    fi

    if [[ "$1" == "unstack" ]]; then
        stop_ringfleet
    fi

    if [[ "$1" == "clean" ]]; then
        # clean.sh runs unstack.sh first, so the services are stopped.
        cleanup_ringfleet
    fi
fi
