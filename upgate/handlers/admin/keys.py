"""/admin/v1/accounts/{id}/keys and /admin/v1/keys/{key_id}: create (the full key once), list,
get, patch (null clears a setting), delete (revoke)."""
from __future__ import annotations

from upgate.services import keys
from upgate.errors import GatewayError
from upgate.handlers.admin.base import AdminHandler, field
from upgate.handlers.admin.spec import AMOUNT_IN, Op, data_of, nullable, obj, ref

SETTINGS = ("name", "monthly_limit_toman", "allowed_models", "rate_limit_rpm", "expires_at")
_BODY = obj({"name": nullable({"type": "string", "maxLength": keys.NAME_MAX}),
             "monthly_limit_toman": nullable(AMOUNT_IN),
             "allowed_models": nullable({"type": "array", "items": {"type": "string"}}),
             "rate_limit_rpm": nullable({"type": "integer", "minimum": keys.RPM_MIN, "maximum": keys.RPM_MAX}),
             "expires_at": nullable({"type": "string", "examples": ["2027-03-20T12:00:00Z"]})}, required=[])


class _Base(AdminHandler):
    def settings(self, body: dict) -> dict:
        """Body fields → keyword arguments of keys.create_key / update_key (given ones only;
        null → None, which clears; a null rpm goes back to the default)."""
        out: dict = {}
        if "name" in body:
            with field("name", parsing=True):
                out["name"] = keys.check_name(body["name"])
        if "monthly_limit_toman" in body:
            out["monthly_limit_micro"] = self.amount(body, "monthly_limit_toman")
        if "allowed_models" in body:
            with field("allowed_models", parsing=True):
                models = body["allowed_models"]
                out["allowed_models"] = None if models is None else keys.check_models(models)
        if "rate_limit_rpm" in body:
            with field("rate_limit_rpm", parsing=True):
                rpm = body["rate_limit_rpm"]
                out["rpm"] = keys.RPM_DEFAULT if rpm is None else keys.check_rpm(rpm)
        if "expires_at" in body:
            with field("expires_at", parsing=True):
                when = body["expires_at"]
                if when is not None and not isinstance(when, str):
                    raise keys.InvalidKeySetting("expires_at must be an ISO 8601 date or time")
                out["expires_at_ms"] = None if when is None else keys.parse_expires(when)
        return out


class AccountKeysHandler(_Base):
    PATH = "/admin/v1/accounts/{id}/keys"
    OPS = {
        "post": Op("Create a key; the answer carries the full key, the only time it is shown.",
                   {"allOf": [ref("Key"), obj({"key": {"type": "string"}})]}, status=201, body=_BODY),
        "get": Op("The account's keys (prefix and last four only).", data_of("Key")),
    }

    async def post(self, account_id: str) -> None:
        settings = self.settings(self.json_body(SETTINGS))
        settings = {k: v for k, v in settings.items() if v is not None}
        pepper = self.ctx.settings.key_pepper
        self.write_json(await self.call(keys.create, pepper, account_id, **settings), 201)

    async def get(self, account_id: str) -> None:
        self.write_json({"data": await self.call(keys.objects, account_id)})


class KeyHandler(_Base):
    PATH = "/admin/v1/keys/{key_id}"
    OPS = {
        "get": Op("One key.", ref("Key")),
        "patch": Op("Change a key's settings; null clears one (no name, no limit, all models, no expiry, "
                    "default rpm). Applied on every node from the next request.", ref("Key"), body=_BODY),
        "delete": Op("Revoke the key for good: its next request, on any node, gets 401.", ref("Key")),
    }

    async def get(self, key_id: str) -> None:
        self.write_json(await self.call(keys.get, key_id))

    async def patch(self, key_id: str) -> None:
        changes = self.settings(self.json_body(SETTINGS))
        if not changes:
            raise GatewayError("invalid_request", "Nothing to change: give at least one setting.")
        self.write_json(await self.call(keys.update, key_id, **changes))

    async def delete(self, key_id: str) -> None:
        self.json_body(())
        self.write_json((await self.call(keys.revoke, key_id))[0])


class KeysHandler(_Base):
    PATH = "/admin/v1/keys"
    OPS = {"get": Op("Find keys by what an operator has of one: ?prefix=sk-up-AbCd (or the shown "
                     "form sk-up-AbCd…wxyz). Prefixes are not unique; reads every account's keys.",
                     data_of("Key"), query={"prefix": {"type": "string"}})}

    async def get(self) -> None:
        prefix = self.get_query_argument("prefix", None)
        if prefix is None:
            raise GatewayError("invalid_request", "prefix is required (like sk-up-AbCd).", param="prefix")
        with field("prefix", parsing=True):
            found = await self.call(keys.find_by_prefix, prefix)
        self.write_json({"data": found})


HANDLERS = [AccountKeysHandler, KeysHandler, KeyHandler]
