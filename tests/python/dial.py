"""The arguments that point the tests' Python clients at a test server
(tests/common/child.rs's `Dial`): `--addr HOST:PORT`, `--unix PATH`, over
TLS `--addr HOST:PORT --tls --ca FILE` (the server's certificate, made for
`localhost`)."""

import argparse


def args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--addr")
    parser.add_argument("--unix")
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--ca")
    return parser.parse_args()
