#!/usr/bin/env bash
# Start the services the test suite talks to, if they are not already running.
# PostgreSQL: 127.0.0.1:5432, trust auth, database "test".
set -euo pipefail

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }

if ! pg_up; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    for version in $(ls /etc/postgresql); do
      pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
    done
  fi
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
fi

if pg_up; then
  echo "services: PostgreSQL is up on 127.0.0.1:5432"
else
  echo "services: PostgreSQL is NOT reachable on 127.0.0.1:5432" >&2
  # Under CI the PostgreSQL tests then fail (never skip); locally they skip.
fi

# RabbitMQ: 127.0.0.1:5672, guest/guest (the RabbitMQ sink's tests, docs/destinations.md).
rabbit_up() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }

if ! rabbit_up && command -v rabbitmq-server >/dev/null 2>&1; then
  rabbitmq-server -detached || true
  for _ in $(seq 1 60); do rabbit_up && break; sleep 1; done
  # The port opens before the broker is ready to take connections.
  timeout 90 rabbitmqctl await_startup >/dev/null 2>&1 || true
fi

if rabbit_up; then
  echo "services: RabbitMQ is up on 127.0.0.1:5672"
else
  echo "services: RabbitMQ is NOT reachable on 127.0.0.1:5672" >&2
  # Under CI the RabbitMQ tests then fail (never skip); locally they skip.
fi

# promtool (Debian package prometheus): the alert rules' tests (deploy/prometheus).
# Only promtool is wanted, never the package's Prometheus server: a policy-rc.d refusing
# service starts is in place while it installs (unless the machine has its own, as a
# Docker image does), no recommended packages (node exporter), and the server unit is
# then stopped and disabled, so nothing runs or holds port 9090 afterwards.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo -n "$@"
  else return 1
  fi
}

install_promtool() {
  local policy=/usr/sbin/policy-rc.d made_policy=""
  if [ ! -e "$policy" ]; then
    as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy" || return 1
    made_policy=yes
  fi
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus)
  local status=0
  as_root "${apt[@]}" >/dev/null || { as_root apt-get update -q >/dev/null && as_root "${apt[@]}" >/dev/null; } || status=1
  if [ -n "$made_policy" ]; then as_root rm -f "$policy"; fi
  if [ -d /run/systemd/system ]; then
    as_root systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  elif [ -x /etc/init.d/prometheus ]; then
    as_root /etc/init.d/prometheus stop >/dev/null 2>&1 || true
    as_root update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
  return "$status"
}

if ! command -v promtool >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "services: installing promtool (apt-get install prometheus, its server kept off)"
  install_promtool || true
fi

if command -v promtool >/dev/null 2>&1; then
  echo "services: promtool is $(command -v promtool)"
else
  echo "services: promtool is NOT installed (Debian/Ubuntu package prometheus)" >&2
  # Under CI the alert rules' tests then fail (never skip); locally they skip.
fi

# Chromium (Debian package chromium): the console's browser tests (Playwright drives it;
# no browser download of Playwright's own).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "services: installing chromium (apt-get install chromium)"
  chromium_apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium)
  as_root "${chromium_apt[@]}" >/dev/null 2>&1 \
    || { as_root apt-get update -q >/dev/null && as_root "${chromium_apt[@]}" >/dev/null; } || true
fi

if command -v chromium >/dev/null 2>&1; then
  echo "services: chromium is $(command -v chromium)"
else
  echo "services: chromium is NOT installed (Debian/Ubuntu package chromium)" >&2
  # Under CI the browser tests then fail (never skip); locally they skip.
fi
