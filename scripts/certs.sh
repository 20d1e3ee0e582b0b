#!/usr/bin/env bash
# Certificates for a Flower deployment over TLS, and (optionally) SuperNode authentication keys.
#   scripts/certs.sh DIR [NODES] [HOSTS]
# DIR/ca.crt, DIR/ca.key          a self-signed certificate authority (the SuperNodes and the flwr CLI trust it)
# DIR/server.pem, DIR/server.key  the SuperLink's certificate, signed by the CA, valid for HOSTS
#                                 (comma-separated DNS names/IPs; default "localhost,127.0.0.1,::1")
# DIR/node-<i>, DIR/node-<i>.pub  with NODES > 0: one ECDSA (P-384) key pair in OpenSSH format per
#                                 SuperNode i = 0..NODES-1, for `flwr supernode register` and
#                                 `flower-supernode --auth-supernode-private-key`
# Needs openssl (and ssh-keygen for node keys). Existing files are overwritten. For a real
# deployment, keep ca.key and the node private keys off the machines that do not need them.
set -euo pipefail
dir=${1:?usage: scripts/certs.sh DIR [NODES] [HOSTS]}
nodes=${2:-0}
hosts=${3:-localhost,127.0.0.1,::1}
mkdir -p "$dir"
cd "$dir"
san=""
IFS=',' read -ra names <<< "$hosts"
for h in "${names[@]}"; do
  if [[ "$h" =~ ^[0-9.]+$ || "$h" == *:* ]]; then san+="IP:$h,"; else san+="DNS:$h,"; fi
done
san=${san%,}
openssl req -x509 -newkey rsa:2048 -nodes -days 365 -sha256 -subj "/CN=flwr-adaptive test CA" \
  -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=${names[0]}" -keyout server.key -out server.csr 2>/dev/null
printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
  "$san" > server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -sha256 \
  -extfile server.ext -out server.pem 2>/dev/null
rm -f server.csr server.ext ca.srl
chmod 600 ca.key server.key
for ((i = 0; i < nodes; i++)); do
  rm -f "node-$i" "node-$i.pub"
  ssh-keygen -q -t ecdsa -b 384 -N "" -C "" -f "node-$i"
done
echo "certificates in $PWD: ca.crt server.pem server.key$( ((nodes > 0)) && echo " + $nodes SuperNode key pairs")"
