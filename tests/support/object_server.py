"""A real S3-protocol server on loopback for the object-storage tests: moto's standalone server
(`python -m moto.server`, as s3fs's own tests start it), its own process, with authentication on
(moto lets any key through unless told otherwise): the first three requests make a user, give it
every s3 right and make its key, so a wrong key is refused as a real server refuses it. Waited
for by connecting, never a sleep; ended when the block ends (or earlier: `stop()`, a server that
goes away)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from support.dask_processes import free_port

START_SECONDS = 60


@dataclass
class ObjectServer:
    """The running server: its endpoint, a key that may do anything in s3, and its process."""

    endpoint: str
    key: str
    secret: str
    process: subprocess.Popen[bytes]

    @property
    def env(self) -> dict[str, str]:
        """The environment a client (a command, a Dask worker) reads the store with."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def stop(self) -> None:
        """The server goes away (a machine or network gone)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def revoke(self) -> None:
        """The key's rights taken away (its policy deleted): every later request is refused."""
        import boto3

        boto3.client("iam", endpoint_url=self.endpoint, **_keys(self)).delete_user_policy(
            UserName="tosca", PolicyName="s3"
        )

    def make_bucket(self, name: str) -> None:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint, **_keys(self)).create_bucket(Bucket=name)


def _keys(server: ObjectServer) -> dict[str, str]:
    return {
        "aws_access_key_id": server.key,
        "aws_secret_access_key": server.secret,
        "region_name": "us-east-1",
    }


@contextlib.contextmanager
def object_server() -> Iterator[ObjectServer]:
    """A moto server on a free loopback port, with one user's key."""
    import boto3

    port = free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.05)
        endpoint = f"http://127.0.0.1:{port}"
        iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        iam.create_user(UserName="tosca")
        policy = {
            "Version": "2012-10-17",
            # s3, and iam so that a test may take the right away again (credentials revoked mid-read)
            "Statement": [{"Effect": "Allow", "Action": ["s3:*", "iam:*"], "Resource": "*"}],
        }
        iam.put_user_policy(UserName="tosca", PolicyName="s3", PolicyDocument=json.dumps(policy))
        made = iam.create_access_key(UserName="tosca")["AccessKey"]
        yield ObjectServer(endpoint, made["AccessKeyId"], made["SecretAccessKey"], process)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(30)
