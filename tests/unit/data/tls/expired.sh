#!/bin/sh
# How expired-ca.crt, expired.crt and expired.key were made (OpenSSL 3.0): a CA of their own
# (its key not kept) and a certificate for localhost valid from 2000-01-01 to 2000-01-02.
set -eu
out=$(pwd); work=$(mktemp -d); cd "$work"
cat > ca.cnf <<'CNF'
[ca]
default_ca = expired
[expired]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = any
x509_extensions = leaf
[any]
commonName = supplied
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[cax]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[req]
distinguished_name = dn
[dn]
CNF
touch index.txt; echo 01 > serial
openssl ecparam -name prime256v1 -genkey -noout -out ca.key
openssl req -x509 -new -key ca.key -subj "/CN=ring-controller test CA for an expired certificate" \
    -days 36500 -sha256 -extensions cax -config ca.cnf -out "$out/expired-ca.crt"
openssl ecparam -name prime256v1 -genkey -noout -out "$out/expired.key"
openssl req -new -key "$out/expired.key" -subj "/CN=localhost" -out expired.csr
openssl ca -batch -config ca.cnf -cert "$out/expired-ca.crt" -keyfile ca.key -notext \
    -startdate 20000101000000Z -enddate 20000102000000Z -in expired.csr -out "$out/expired.crt"
rm -rf "$work"
