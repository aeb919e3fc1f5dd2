#!/bin/bash
# tls.sh - the coordinator's port over TLS (--tls-cert, --tls-key). A local
# job of 2 workers joins over wss:// (the workers trust the certificate
# itself), trains, and rescales 2 -> 3 at rowshiftctl's word, moving exactly
# its plan diff; rowshiftctl finds the CA in the admin file; /healthz and
# /metrics answer over https. A plain ws:// or http:// client gets nothing.
# A worker that does not trust the certificate, or reaches the coordinator
# under a name the certificate does not carry, stops at its own TLS check
# at once, says why, and never joins. The port speaks HTTP/1.1 only, so a
# client that asks for HTTP/2 gets the whole dashboard and the Host check. The coordinator refuses a certificate without
# its key, a key that is not the certificate's, and a file that is not PEM,
# naming the flag.
set -u
. "$(dirname "$0")/../lib/itest.sh"

mkcert() { # mkcert NAME: a self-signed EC certificate for 127.0.0.1 only (no DNS name), and its key
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$tmp/$1.key" \
		-out "$tmp/$1.pem" -days 2 -subj "/CN=rowshift-$1" -addext "subjectAltName=IP:127.0.0.1" 2>>"$tmp/openssl.err"
}
mkcert srv
mkcert other
check "openssl made the test certificates" test -s "$tmp/srv.pem" -a -s "$tmp/other.key"

port=$(free_port)
"$bin/rowshift-coordinator" --local --workers 2 --config examples/dlrm-small.json --steps 100000 \
	--listen 127.0.0.1:$port --tls-cert "$tmp/srv.pem" --tls-key "$tmp/srv.key" --admin-file "$tmp/admin.json" \
	>"$tmp/c.out" 2>"$tmp/c.err" &
coord=$!
wait_for "$tmp/c.out" "step *20 " 30
check "2 workers join over wss:// and train" bash -c "grep -q 'joined wss://127.0.0.1:$port' '$tmp/c.err' && grep -q 'step *20 ' '$tmp/c.out'"
adm() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ""))' "$tmp/admin.json" "$1"; }
check "the admin file names the wss:// URL and the CA to verify it with" \
	test "$(adm url)" = "wss://127.0.0.1:$port" -a "$(adm tls_ca)" = "$tmp/srv.pem"
token=$(adm token)

# rowshiftctl: status and a live rescale, over TLS, with the admin file's CA
env -u ROWSHIFT_TLS_CA timeout 20 "$bin/rowshiftctl" status --json --admin-file "$tmp/admin.json" >"$tmp/status.json" 2>&1
check "rowshiftctl status reads the snapshot over TLS" grep -q '"worker-1"' "$tmp/status.json"
env -u ROWSHIFT_TLS_CA timeout 20 "$bin/rowshiftctl" scale --workers 3 --admin-file "$tmp/admin.json" >"$tmp/scale.out" 2>&1
wait_for "$tmp/c.out" "generation 2 resumed" 60
check "rowshiftctl scale --workers 3: the job reshards 2 -> 3 over TLS and resumes" \
	grep -q "generation 2 resumed at step" "$tmp/c.out"
check "the reshard moved exactly its plan diff" moved_is_plan_diff "$tmp/c.out" 1

# HTTP over TLS; nothing in clear
check "/healthz answers over https (the certificate verified)" \
	bash -c "curl -sS --max-time 10 --cacert '$tmp/srv.pem' https://127.0.0.1:$port/healthz | grep -qx ok"
check "/metrics answers over https" \
	bash -c "curl -sS --max-time 10 --cacert '$tmp/srv.pem' https://127.0.0.1:$port/metrics | grep -q '^rowshift_'"
curl -sS --max-time 10 --cacert "$tmp/srv.pem" --http1.1 -o "$tmp/page1" https://127.0.0.1:$port/
curl -sS --max-time 10 --cacert "$tmp/srv.pem" --http2 -o "$tmp/page2" https://127.0.0.1:$port/
check "the dashboard arrives whole over https, also to a client that asks for HTTP/2 ($(stat -c %s "$tmp/page2" 2>/dev/null) bytes)" \
	bash -c "[ -s '$tmp/page1' ] && cmp -s '$tmp/page1' '$tmp/page2'"
check "... and the Host check holds for it (HTTP/1.1 only: h2 would carry :authority instead)" bash -c \
	"[ \"\$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert '$tmp/srv.pem' --http2 -H 'Host: evil.example' https://127.0.0.1:$port/metrics)\" = 403 ]"
check "a plain http:// request gets no answer" bash -c "! curl -sS --max-time 10 http://127.0.0.1:$port/healthz"
check "a plain ws:// client cannot connect" bash -c \
	"! python3 -c 'import sys; sys.path.insert(0, \"tests/integration\"); import wslib; print(wslib.connect($port, \"rowshift-status\", \"/status\"))' 2>&1 | grep -q socket"

# workers that must not join: another CA, a name the certificate does not carry
ROWSHIFT_JOIN_TOKEN=$token timeout 30 "$bin/rowshift-worker" --coordinator "wss://127.0.0.1:$port" \
	--config examples/dlrm-small.json --tls-ca "$tmp/other.pem" --coordinator-grace-ms 60000 --name badca >"$tmp/badca.out" 2>&1
rc=$?
check "a worker that trusts another CA gives up at once, not after its 60 s grace (exit $rc)" test "$rc" != 0 -a "$rc" != 124
check "... saying the certificate failed verification" grep -q "self-signed certificate" "$tmp/badca.out"
ROWSHIFT_JOIN_TOKEN=$token timeout 30 "$bin/rowshift-worker" --coordinator "wss://localhost:$port" \
	--config examples/dlrm-small.json --tls-ca "$tmp/srv.pem" --coordinator-grace-ms 60000 --name badname >"$tmp/badname.out" 2>&1
rc=$?
check "a worker reaching it under a name the certificate lacks gives up at once (exit $rc)" test "$rc" != 0 -a "$rc" != 124
check "... saying the host name does not match" grep -q "hostname mismatch" "$tmp/badname.out"
check "neither joined" bash -c "! grep -Eq '(badca|badname) joined' '$tmp/c.err'"
ROWSHIFT_JOIN_TOKEN=$token timeout 30 "$bin/rowshift-worker" --coordinator "wss://127.0.0.1:$port" \
	--config examples/dlrm-small.json --tls-ca "$tmp/missing.pem" >"$tmp/noca.out" 2>&1
rc=$?
check "a missing --tls-ca is a usage error naming the file (exit $rc)" bash -c "[ $rc = 2 ] && grep -q missing.pem '$tmp/noca.out'"
check "the job trained on" bash -c "kill -0 $coord && tail -n 3 '$tmp/c.out' | grep -q 'samples/s'"
kill -INT $coord
wait $coord 2>/dev/null

# the coordinator refuses a broken TLS set-up, naming what is wrong
bad() { # bad DESCRIPTION PATTERN FLAGS...: the coordinator exits non-zero saying PATTERN
	local what=$1 pattern=$2; shift 2
	timeout 20 "$bin/rowshift-coordinator" --local --workers 1 --config examples/dlrm-small.json --steps 10 \
		--listen 127.0.0.1:0 --admin-file "$tmp/bad-admin.json" "$@" >"$tmp/bad.out" 2>&1
	local rc=$?
	check "$what (exit $rc)" bash -c "[ $rc != 0 ] && [ $rc != 124 ] && grep -q -- '$pattern' '$tmp/bad.out'"
}
bad "a certificate without its key is refused" "--tls-cert without --tls-key" --tls-cert "$tmp/srv.pem"
bad "a key that is not the certificate's is refused" "is the key" --tls-cert "$tmp/srv.pem" --tls-key "$tmp/other.key"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$tmp/dns.key" -out "$tmp/dns.pem" \
	-days 2 -subj /CN=rowshift-dns -addext "subjectAltName=DNS:localhost" 2>>"$tmp/openssl.err"
bad "in local mode, a certificate that does not name 127.0.0.1 is refused, saying how to make one" \
	"does not name 127.0.0.1.*subjectAltName=IP:127.0.0.1" --tls-cert "$tmp/dns.pem" --tls-key "$tmp/dns.key"
bad "a certificate file that is not PEM is refused" "no PEM certificate" --tls-cert examples/dlrm-small.json --tls-key "$tmp/srv.key"
finish_checks tls
