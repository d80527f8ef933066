import re
from pathlib import Path

from upgate.errors import CODES, GatewayError

SPEC = Path(__file__).resolve().parents[3] / "shared" / "spec" / "interface.md"


def test_every_spec_code_is_in_the_catalogue_with_its_status():
    if not SPEC.exists():  # shared/ sits beside the repo in CI and here
        return
    rows = re.findall(r"^\| (\d{3}) \| (\w+) \|", SPEC.read_text(), re.M)
    assert len(rows) >= 18
    for status, code in rows:
        assert code in CODES, code
        assert CODES[code].status == int(status), code


def test_shape_and_hints():
    e = GatewayError("insufficient_balance", svc={"balance_toman": "1.000000"})
    assert e.body() == {"error": {"message": e.message, "type": "insufficient_balance",
                                  "code": "insufficient_balance", "param": None,
                                  "svc": {"balance_toman": "1.000000"}}}
    assert e.headers() == {"x-should-retry": "false"}
    assert GatewayError("too_many_concurrent_streams").headers() == {"Retry-After": "5"}
    assert GatewayError("free_quota_exceeded").headers()["Retry-After"] == "3600"
    assert GatewayError("upstream_unavailable").headers() == {"Retry-After": "30"}
    assert "svc" not in GatewayError("not_found").body()["error"]


def test_spec_retry_after_values():
    assert CODES["too_many_concurrent_streams"].retry_after == 5
    assert CODES["free_quota_exceeded"].retry_after == 3600
    assert CODES["upstream_unavailable"].retry_after == 30
