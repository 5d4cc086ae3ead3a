"""A small client of MLflow's REST API, written with the standard library.

Hand-written on purpose: the image is kept lean, and `mlflow-skinny`, MLflow's smallest client, would
bring its dependency tree into every training image for the few calls a run makes (create or resume
a run, log a batch, end it). `MLFLOW_TRACKING_URI` names an http(s) server; the header MLflow's own
clients send is built from the same variables they read.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Mapping

from trainer import contract as c

REQUEST_TIMEOUT_S = 30.0  # long: a request that timed out but was applied would be sent twice


class Unreachable(Exception):
    """The server did not answer, or answered that it could not serve now (5xx, 429): worth a retry."""


class Refused(Exception):
    """The server answered no (4xx): the same request would be refused again."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code


class MlflowApi:
    def __init__(self, uri: str, authorization: str | None):
        self.uri = uri.rstrip("/")
        self.base = self.uri + "/api/2.0/mlflow/"
        self.headers = {"Content-Type": "application/json"}
        if authorization:
            self.headers["Authorization"] = authorization

    def get(self, path: str, **query: str) -> dict:
        return self._send(urllib.request.Request(self.base + path + "?" + urllib.parse.urlencode(query), headers=self.headers))

    def post(self, path: str, body: dict) -> dict:
        return self._send(urllib.request.Request(self.base + path, json.dumps(body).encode(), self.headers))

    def _send(self, request: urllib.request.Request) -> dict:
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            if error.code >= 500 or error.code == 429:
                raise Unreachable(f"HTTP {error.code}") from error
            try:
                answer = json.loads(error.read())
            except ValueError:
                answer = {}
            raise Refused(answer.get("error_code", f"HTTP {error.code}"), answer.get("message", error.reason)) from error
        except (urllib.error.URLError, OSError) as error:
            raise Unreachable(str(getattr(error, "reason", error))) from error


def authorization(env: Mapping[str, str]) -> str | None:
    """The header MLflow's own clients send: a bearer token, or basic auth from a username and password."""
    if token := env.get(c.MLFLOW_TRACKING_TOKEN):
        return f"Bearer {token}"
    if user := env.get(c.MLFLOW_TRACKING_USERNAME):
        pair = f"{user}:{env.get(c.MLFLOW_TRACKING_PASSWORD, '')}".encode()
        return "Basic " + base64.b64encode(pair).decode()
    return None
