import orjson
import pytest

from upgate.errors import GatewayError
from upgate.billing.sizing import wants_web_search
from upgate.handlers.requests import parse_json, validate

CHAT = {"model": "a/b", "messages": [{"role": "user", "content": "hi"}]}


def body(**kw):
    return {**CHAT, **kw}


@pytest.mark.parametrize("raw", [b"{", b"[]", b'"x"', b"\xff\xfe", b"[" * 5000 + b"]" * 5000])
def test_malformed_json_is_400(raw):
    with pytest.raises(GatewayError) as e:
        parse_json(raw)
    assert e.value.code == "invalid_request" and e.value.status == 400


@pytest.mark.parametrize("raw", ['"100"', "100.0", "1e2", "true", "-1", "0", "[1]", "{}"])
@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens", "max_output_tokens", "n", "best_of"])
def test_integer_fields_must_be_json_integers(field, raw):
    b = parse_json(orjson.dumps(CHAT)[:-1] + f', "{field}": {raw}}}'.encode())
    with pytest.raises(GatewayError) as e:
        validate(b, "chat")
    assert e.value.code == "invalid_request"


def test_valid_integers_and_bounds():
    assert validate(body(max_tokens=100, n=2, best_of=16), "chat").stream is False
    with pytest.raises(GatewayError):
        validate(body(n=17), "chat")


def test_model_missing_or_not_a_string():
    with pytest.raises(GatewayError, match="required"):
        validate({"messages": []}, "chat")
    with pytest.raises(GatewayError):
        validate(body(model=5), "chat")


def test_models_list_rules():
    assert validate(body(models=["c/d", "a/b", "e/f"]), "chat").model_ids == ["a/b", "c/d", "e/f"]
    for bad in ("c/d", [], ["x"] * 6, [1], [""]):
        with pytest.raises(GatewayError):
            validate(body(models=bad), "chat")


@pytest.mark.parametrize("field,value", [("plugins", {"id": "web"}), ("plugins", ["web"]),
                                         ("stream", "yes"), ("tools", {}), ("reasoning", []),
                                         ("web_search_options", [])])
def test_malformed_structured_fields(field, value):
    with pytest.raises(GatewayError):
        validate(body(**{field: value}), "chat")


def test_route_shapes():
    with pytest.raises(GatewayError):
        validate({"model": "a/b"}, "chat")
    with pytest.raises(GatewayError):
        validate({"model": "a/b", "input": 5}, "embeddings")
    with pytest.raises(GatewayError):
        validate({"model": "a/b", "input": "x", "stream": True}, "embeddings")
    assert validate({"model": "a/b", "prompt": "x"}, "completions")


def test_web_search_detection():
    assert wants_web_search({}, "a/b:online")
    assert wants_web_search({"plugins": [{"id": "web"}]}, "a/b")
    assert wants_web_search({"web_search_options": {}}, "a/b")
    assert not wants_web_search({"plugins": [{"id": "pdf"}]}, "a/b")
