"""The HTTP side of `d2t-lab probe`: what a server is, and one request to it, its answer handed back raw.

Standard library only (`urllib`): every call waits at most `--timeout` seconds to connect,
between reads and for its whole answer (`helpers.io.remote_access.timeout`), and every way a server can fail to answer is
one `BadInputError` naming the URL: connection refused, a timeout, a closed connection, an
HTTP error with the server's own message.

- `discover(url)`: GET `/v1/models` (OpenAI-compatible), SGLang's `/get_server_info` (or
  `/server_info`), `/metrics` (Prometheus text: `vllm:spec_decode_*` or `sglang:*`), and, when
  there is no `/v1/models`, whether SGLang's `/generate` exists. The engine is SGLang when server
  info answers or the metrics are `sglang:`, vLLM when the metrics are `vllm:` or the models are
  owned by vllm. vLLM answers `/server_info` too when started with `VLLM_SERVER_DEV_MODE=1`
  (`{"vllm_config", "vllm_env", "system_env"}`, `vllm/entrypoints/serve/dev/server_info/api_router.py`):
  that is vLLM's, read again as JSON (`?config_format=json`) for its speculative config
  (`Server.setup`: the algorithm, the draft, a synthetic rejection sampler).
  llama.cpp's `llama-server` is recognised by its `/props` answer (`build_info`,
  `default_generation_settings`, `total_slots`: tools/server/server-context.cpp `get_props`), its
  models listed as `owned_by: llamacpp`, or its `llamacpp:` metrics.
- `send(server, ...)`: one greedy request. Token ids in: vLLM (or any OpenAI server)
  `/v1/completions` with `"prompt": [ids]`, `"return_token_ids": true`; SGLang `/generate` with
  `"input_ids"` and `"sampling_params"`; llama.cpp its native `/completion` (`llamacpp_body`: the ids
  as `prompt`, `n_predict`, temperature 0, `return_tokens`, no prompt cache). Messages in:
  `/v1/chat/completions`. It hands back the endpoint and the answer's JSON object as it came: what
  the answer says is read by `helpers.serving.records.read_answer`.

`--api-key KEY`: sent as `Authorization: Bearer KEY` on every call (vLLM, SGLang and llama-server
all read it; llama-server asks it on every path but /health, /metrics included).
"""
from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit, urlunsplit
from urllib.request import Request, urlopen

from helpers.core.errors import BadInputError, clip
from helpers.engines.counting import LLAMACPP_PREFIX, SGLANG_PREFIX, VLLM_PREFIX
from helpers.io import remote_access
from helpers.serving.startup import Setup, setup_from_server

_SUFFIXES = ("/v1/models", "/v1", "/metrics", "/get_server_info", "/server_info", "/generate", "/health")


@dataclass
class Server:
    """What a URL is: its base, engine, served models, SGLang's server info and its first /metrics page."""

    url: str  # base URL: scheme://host:port[/prefix]
    engine: str  # "vllm", "sglang", "llamacpp" or "openai" (an OpenAI-compatible server of no known engine)
    models: list[str] = field(default_factory=list)
    server_info: dict | None = None  # SGLang /get_server_info
    metrics: str | None = None  # the /metrics text at discovery (None: no /metrics)
    generate: bool = False  # SGLang's /generate answers
    timeout: float = 30.0
    vllm_info: dict | None = None  # vLLM's /server_info (dev mode), JSON form where it gives one
    props: dict | None = None  # llama.cpp's /props
    completion_path: str | None = None  # llama-server's native /completion (token ids in and out), None elsewhere
    api_key: str | None = None  # sent as a bearer token on every call
    roots: dict = field(default_factory=dict)  # /v1/models: model id -> its `root` (the folder or repo it was loaded from)

    @property
    def setup(self) -> Setup:
        """What the server reports about its set-up (`helpers.serving.startup.setup_from_server`)."""
        if self.vllm_info is not None:
            return setup_from_server(self.vllm_info, self.url + "/server_info")
        return setup_from_server(self.server_info, self.url + "/get_server_info")

    @property
    def convention(self) -> str:
        """Whose aux-layer convention the engine-free comparison uses: SGLang's for SGLang, else vLLM's."""
        return "sglang" if self.engine == "sglang" else "vllm"

    def needs_model(self, token_ids: bool) -> bool:
        """Whether a request names the served model: not for token ids sent to SGLang's /generate or
        llama.cpp's /completion (it serves one model)."""
        return not (token_ids and (self.engine == "sglang" or self.completion_path is not None))

    def call(self, path: str, body: dict | None = None) -> tuple[int, bytes]:
        """`call` on this server, with its timeout and API key."""
        return call(self.url + path, body, timeout=self.timeout, api_key=self.api_key)

    @property
    def speculative_algorithm(self) -> str | None:
        return None if self.server_info is None else self.server_info.get("speculative_algorithm")


def served_mismatch(server: Server, model: str | None, target, target_cfg: dict | None) -> str | None:
    """Why `--target DIR` is not the model the server serves, or None: the served model's `/v1/models`
    `root` (the folder or Hub repo it was loaded from; vLLM, SGLang) names another model than DIR's
    folder (compared by the last path component, case and `-`/`_`/`.` ignored) or its config's
    `_name_or_path` (`target_cfg`: DIR's config.json as the door read it). None when the server lists
    no root. Reads nothing."""
    from pathlib import Path

    root = server.roots.get(model) if model else None
    if not root or target is None:
        return None
    def key(x: str) -> str:
        return "".join(ch for ch in str(x).rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1].lower() if ch.isalnum())

    t = Path(target)
    names = {key(t.resolve().name), key(t.name)}
    names |= {key(part.split("--")[-1]) for part in t.resolve().parts if part.startswith("models--")}  # the Hub cache
    cfg = target_cfg
    if isinstance(cfg, dict) and isinstance(cfg.get("_name_or_path"), str) and cfg["_name_or_path"]:
        names.add(key(cfg["_name_or_path"]))
    names.discard("")
    if key(root) in names or not key(root):
        return None
    return (f"the server serves {model!r} from {root!r} (its /v1/models root), not --target {str(target)!r}: the "
            "served tokens are compared with another model's, so a difference says nothing about the verify step; "
            "pass the served model's folder as --target")


def base_url(url: str) -> str:
    """The server's base URL (a trailing /v1, /metrics, ... dropped); one line for what is not http(s)."""
    text = str(url).strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadInputError(text, "is not a server URL: expected http://HOST:PORT (the server's base address)")
    path = parts.path.rstrip("/")
    for suffix in _SUFFIXES:
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    return urlunsplit((parts.scheme, parts.netloc, path.rstrip("/"), "", ""))


def call(url: str, body: dict | None = None, timeout: float = 30.0, api_key: str | None = None) -> tuple[int, bytes]:
    """GET (or POST `body` as JSON) -> (HTTP status, body). An HTTP error status is returned, not
    raised; a server that cannot be reached, does not answer in time or hangs up is one line.
    `api_key`: sent as `Authorization: Bearer KEY`."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/plain"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = Request(url, data=data, method="GET" if body is None else "POST", headers=headers)
    late = f"the server did not answer within {timeout:g} s (--timeout SECONDS)"
    def get() -> tuple[int, bytes]:
        with urlopen(req, timeout=timeout) as r:  # noqa: S310 (the URL the user gave)
            return r.status, r.read()

    try:  # within a deadline too: a server trickling bytes never trips the per-read timeout
        return remote_access.within_deadline(timeout, get, progress=url)
    except HTTPError as e:
        try:
            return e.code, e.read()
        except (OSError, ValueError):
            return e.code, b""
    except (TimeoutError, socket.timeout):
        raise BadInputError(url, late) from None
    except URLError as e:
        reason = e.reason
        if isinstance(reason, (TimeoutError, socket.timeout)):
            raise BadInputError(url, late) from None
        if isinstance(reason, ConnectionRefusedError):
            raise BadInputError(url, "nothing answers there (connection refused): is the server up, on this host "
                                "and port?") from None
        raise BadInputError(url, f"cannot reach the server: {clip(str(reason), 160)}") from None
    except (ConnectionError, OSError) as e:  # RemoteDisconnected, a reset
        raise BadInputError(url, f"the server closed the connection without answering ({type(e).__name__})") from None
    except ValueError as e:
        raise BadInputError(url, f"not a URL urllib can open: {clip(str(e), 120)}") from None


def _json(status: int, body: bytes):
    if status != 200:
        return None
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None


def is_llamacpp_props(props) -> bool:
    """Whether a /props answer is llama-server's (tools/server/server-context.cpp `get_props`)."""
    return isinstance(props, dict) and "default_generation_settings" in props and (
        "build_info" in props or "total_slots" in props)


def discover(url: str, timeout: float, api_key: str | None = None) -> Server:
    """Find out what answers at `url` (see the module docstring); one line when it is not an
    OpenAI-compatible server (no /v1/models and no /generate)."""
    base = base_url(url)

    def call(u, body=None, timeout=timeout):  # every call with the key
        return _call(u, body, timeout=timeout, api_key=api_key)

    status, body = call(base + "/v1/models", timeout=timeout)  # a server that is down ends here
    models = _json(status, body)
    ids, owners, roots = [], set(), {}
    if isinstance(models, dict) and isinstance(models.get("data"), list):
        for m in models["data"]:
            if isinstance(m, dict) and isinstance(m.get("id"), str):
                ids.append(m["id"])
                if isinstance(m.get("root"), str) and m["root"].strip():
                    roots[m["id"]] = m["root"].strip()
                owners.add(str(m.get("owned_by", "")).lower())
    has_models = isinstance(models, dict) and isinstance(models.get("data"), list)
    if status in (401, 403):
        raise BadInputError(base + "/v1/models", f"HTTP {status}: the server wants credentials: " + (
            "it refused the API key given (--api-key)" if api_key else "pass its key with --api-key KEY"))
    info, vllm_info = None, None
    props = _json(*call(base + "/props", timeout=timeout))
    props = props if is_llamacpp_props(props) else None
    for path in (() if props is not None else ("/get_server_info", "/server_info")):
        got = _json(*call(base + path, timeout=timeout))
        if isinstance(got, dict) and "vllm_config" in got:  # vLLM's dev-mode /server_info, not SGLang's
            as_json = _json(*call(base + "/server_info?config_format=json", timeout=timeout))
            vllm_info = as_json if isinstance(as_json, dict) and "vllm_config" in as_json else got
            break
        if isinstance(got, dict):
            info = got
            break
    st, text = call(base + "/metrics", timeout=timeout)
    metrics = text.decode("utf-8", errors="replace") if st == 200 else None
    generate = info is not None
    if not has_models and not generate:
        gst, _ = call(base + "/generate", timeout=timeout)  # SGLang: POST only (405 to a GET)
        generate = gst in (200, 400, 405, 422)
        if not generate:
            raise BadInputError(base, f"is not an OpenAI-compatible server: GET /v1/models answered HTTP {status} "
                                f"and there is no SGLang /generate (HTTP {gst}); give the server's base URL, "
                                "e.g. http://HOST:PORT")
    metrics_text = metrics or ""
    completion = None
    if props is not None or LLAMACPP_PREFIX in metrics_text or "llamacpp" in owners:
        engine, completion = "llamacpp", "/completion"
    elif vllm_info is None and (info is not None or SGLANG_PREFIX in metrics_text or "sglang" in owners):
        engine = "sglang"
    elif vllm_info is not None or VLLM_PREFIX in metrics_text or "vllm" in owners:
        engine = "vllm"
    else:
        engine = "openai"
    return Server(base, engine, ids, info, metrics, generate, timeout, vllm_info, props, completion, api_key, roots)


_call = call


def _post(server: Server, path: str, body: dict) -> dict:
    url = server.url + path
    status, raw = server.call(path, body)
    if status != 200:
        msg = raw.decode("utf-8", errors="replace")
        try:
            err = json.loads(msg)
            err = err.get("error", err) if isinstance(err, dict) else err
            msg = err.get("message", msg) if isinstance(err, dict) else str(err)
        except ValueError:
            pass
        raise BadInputError(url, f"HTTP {status}: {clip(msg, 200) or 'no message'}")
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        head = clip(raw[:200].decode("utf-8", "replace"), 80)
        raise BadInputError(url, f"answered something that is not JSON: {head!r}") from None
    if not isinstance(obj, dict):
        raise BadInputError(url, f"answered a JSON {type(obj).__name__}, not an object")
    return obj


def send(server: Server, *, ids: list[int] | None = None, messages: list[dict] | None = None,
         max_new_tokens: int, model: str | None, temperature: float = 0.0,
         seed: int | None = None) -> tuple[str, dict]:
    """One request at `temperature` (0: greedy; `seed` sent where given): (the endpoint used, its answer's
    JSON object, unread: `helpers.serving.records.read_answer`)."""
    t = float(temperature)
    t = int(t) if t == 0 else t  # greedy is sent as 0, as before
    extra = {} if seed is None else {"seed": int(seed)}
    if ids is not None and server.engine == "sglang" and server.generate:
        path = "/generate"
        return path, _post(server, path, {"input_ids": list(ids), "sampling_params": {
            "temperature": t, "max_new_tokens": int(max_new_tokens), **({"sampling_seed": int(seed)} if seed is not None
                                                                       else {})}})
    if ids is not None and server.completion_path:
        path = server.completion_path
        return path, _post(server, path, llamacpp_body(ids, max_new_tokens, temperature=t, seed=seed))
    if ids is not None:
        path = "/v1/completions"
        return path, _post(server, path, {"model": model, "prompt": list(ids), "max_tokens": int(max_new_tokens),
                                          "temperature": t, "return_token_ids": True, **extra})
    path = "/v1/chat/completions"
    return path, _post(server, path, {"model": model, "messages": list(messages), "max_tokens": int(max_new_tokens),
                                      "temperature": t, **extra})


def llamacpp_body(ids: list[int], max_new_tokens: int, temperature: float = 0, seed: int | None = None) -> dict:
    """llama-server's native /completion for one request (greedy by default): the prompt as token ids, the
    output's ids back (`return_tokens`), no prompt cache (each request drafts from a cold start, as the
    engine-free loop does). Sampled: top_k 0, top_p 1, min_p 0 as well, so the target samples plain
    softmax(logits / T) as the kit's loop does (llama-server's defaults 40 / 0.95 / 0.05 would truncate it)."""
    body = {"prompt": [int(t) for t in ids], "n_predict": int(max_new_tokens), "temperature": temperature,
            "return_tokens": True, "cache_prompt": False}
    if temperature:
        body.update({"top_k": 0, "top_p": 1.0, "min_p": 0.0})
    if seed is not None:
        body["seed"] = int(seed)
    return body


