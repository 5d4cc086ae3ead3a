"""An object store prefix, `s3://BUCKET/PREFIX/`, downloaded whole into a directory (trainer/fetch.py
verifies what came).

Through boto3, so the credentials are found where the cluster keeps them for AWS's SDKs:
`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (the stack's `secretEnv`), a web identity (EKS's
IRSA and pod identity), an instance profile. `endpoint` names an S3-compatible service (MinIO,
Ceph, Google Cloud Storage's XML API with HMAC keys, R2, a gateway such as versitygw); unset, AWS's.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

SCHEME = "s3://"
TIMEOUT_S = 60


class ObjectStoreError(RuntimeError):
    """Why the prefix could not be downloaded, in the store's own words."""


def bucket_and_prefix(url: str) -> tuple[str, str]:
    """`s3://bucket/a/b` and `s3://bucket/a/b/` both name the objects under `a/b/`."""
    bucket, _, prefix = url[len(SCHEME) :].partition("/")
    return bucket, prefix.rstrip("/") + "/" if prefix.strip("/") else ""


def download_prefix(url: str, into: Path, endpoint: str | None, tries: int) -> tuple[int, int]:
    """Every object under the URL's prefix into `into` (made here), at its path below the prefix;
    returns how many files and bytes."""
    import boto3
    import botocore.config
    import botocore.exceptions

    bucket, prefix = bucket_and_prefix(url)
    config = botocore.config.Config(retries={"max_attempts": tries, "mode": "standard"}, connect_timeout=TIMEOUT_S, read_timeout=TIMEOUT_S)
    client = boto3.session.Session().client("s3", endpoint_url=endpoint or None, config=config)  # credentials found now
    into.mkdir()
    files = size = 0
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for listed in page.get("Contents", []):
                relative = listed["Key"][len(prefix) :]
                if not relative or relative.endswith("/"):
                    continue  # a folder's marker object
                target = into.joinpath(*_inside(relative, listed["Key"]))
                target.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(bucket, listed["Key"], str(target))
                files, size = files + 1, size + listed["Size"]
    except botocore.exceptions.ClientError as error:
        answer = error.response.get("Error", {})
        raise ObjectStoreError(f"{answer.get('Code', '?')}: {answer.get('Message', error)}") from None
    except botocore.exceptions.BotoCoreError as error:  # no credentials, an endpoint that does not answer
        raise ObjectStoreError(str(error)) from None
    if not files:
        raise ObjectStoreError(f"no object under the prefix {prefix or '(the whole bucket)'}")
    return files, size


def _inside(relative: str, key: str) -> tuple[str, ...]:
    parts = PurePosixPath(relative).parts
    if relative.startswith("/") or any(part in ("..", ".") for part in parts):
        raise ObjectStoreError(f"the object {key!r} would land outside the directory")
    return parts
