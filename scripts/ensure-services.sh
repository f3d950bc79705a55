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
