#!/bin/sh
# A RabbitMQ user for one bridge, confined to what a bridge needs (docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other):
# write to the `baton.bridge` exchange, and declare and read its own reply
# queue; nothing else (no fleet queue, not even through the default exchange).
#
#   deploy/rabbitmq/add-bridge-user.sh USER PASSWORD REPLY_QUEUE [QUEUE_PREFIX]
#
# With Docker Compose:
#   docker compose exec -T rabbitmq sh -s -- wechat-bridge "$PW" wechat.replies < deploy/rabbitmq/add-bridge-user.sh
# Never give a bridge's user the `impersonator` tag: it could forge user_id.
set -eu
user=$1
password=$2
queue=$3
prefix=${4:-}
regex() { printf '^%s$' "$(printf '%s' "$1" | sed 's/[].[\*^$()+?{|]/\\&/g')"; }
rabbitmqctl add_user "$user" "$password"
rabbitmqctl set_permissions -p / "$user" "$(regex "$queue")" "$(regex "${prefix}baton.bridge")" "$(regex "$queue")"
