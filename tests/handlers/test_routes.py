"""Routing per the spec: every unknown or reserved route is 404 not_found in the error shape,
and every response — errors included — carries X-Svc-Request-Id."""
import httpx
import pytest


def assert_error(resp, status, code):
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert err["code"] == code and err["type"] == code and err["param"] is None
    assert isinstance(err["message"], str) and err["message"]
    assert resp.headers["X-Svc-Request-Id"].startswith("req_")
    return err


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE", "PUT", "PATCH"])
@pytest.mark.parametrize("path", ["/v1/files", "/v1/files/abc", "/v1/fine_tuning/jobs", "/v1/assistants",
                                  "/v1/batches/x/cancel", "/v1/audio/speech", "/v1/images/generations",
                                  "/v1/nothing", "/chat/completions", "/models", "/", "/v2/models",
                                  "/v1/chat/completions/extra"])
def test_unknown_and_removed_routes_are_404(node, method, path):
    resp = httpx.request(method, node.url + path, content=b"{}")
    assert_error(resp, 404, "not_found")
    assert resp.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("path", ["/v1/../healthz", "/v1/./models/../svc/me", "/v1//chat/completions",
                                  "/v1/chat%2Fcompletions", "/v1/models/..%2F..%2Fhealthz", "//healthz"])
def test_path_tricks_are_not_normalised_into_other_routes(node, path):
    """Sent verbatim (httpx would normalise the path client-side)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=5)
    conn.request("POST" if "chat" in path else "GET", path, body=b"{}")
    resp = conn.getresponse()
    assert resp.status == 404
    assert resp.getheader("X-Svc-Request-Id")
    conn.close()


def test_responses_route_points_to_chat_completions(node):
    resp = httpx.post(node.base + "/responses", json={"model": "mock/chat-1", "input": "hi"})
    err = assert_error(resp, 404, "not_found")
    assert "chat/completions" in err["message"]


def test_healthz_and_request_ids_are_unique(node):
    a, b = httpx.get(node.url + "/healthz"), httpx.get(node.url + "/healthz")
    assert a.status_code == 200 and a.json()["status"] == "ok"
    assert a.headers["X-Svc-Request-Id"] != b.headers["X-Svc-Request-Id"]


def test_wrong_method_on_a_real_route_is_an_error_in_shape(node):
    resp = httpx.get(node.base + "/chat/completions")
    assert resp.status_code == 405
    assert resp.json()["error"]["code"] == "invalid_request"
    assert "X-Svc-Request-Id" in resp.headers


@pytest.mark.parametrize("method,path", [("GET", "/v1/files"), ("POST", "/v1/responses"), ("GET", "/nope")])
def test_a_404_keeps_the_connection_alive_for_the_next_request(node, method, path):
    """A client's pool reuses the connection after an error: it must not be closed under it."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=5)
    conn.request(method, path, body=b'{"model": "x"}')
    first = conn.getresponse()
    first.read()
    assert first.status == 404 and first.getheader("Connection") != "close"
    sock = conn.sock
    conn.request("GET", "/healthz")
    second = conn.getresponse()
    second.read()
    assert second.status == 200
    assert conn.sock is sock  # the same TCP connection answered both
    conn.close()


def test_every_response_carries_date_server_json_type_and_its_own_request_id(node):
    import email.utils
    import time

    ids = set()
    for path in ("/healthz", "/v1/models", "/v1/nothing"):
        resp = httpx.get(node.url + path)
        sent = email.utils.parsedate_to_datetime(resp.headers["Date"]).timestamp()
        assert abs(sent - time.time()) < 5
        assert resp.headers["Server"].startswith("upgate/")
        assert resp.headers["Content-Type"].startswith("application/json")
        ids.add(resp.headers["X-Svc-Request-Id"])
    assert len(ids) == 3
