"""AlterUserScramCredentials and DescribeUserScramCredentials (KIP-554), ZooKeeper mode.

As Kafka's ``ZkAdminManager``: credentials live in ``/config/users/<user>`` under the
mechanism's name, written with a ``/config/changes`` notification; any broker answers.
The client sends the salted password (never the password); the broker derives the stored
and server keys. Kafka's checks: a mechanism other than SCRAM-SHA-256/512 is
UNSUPPORTED_SASL_MECHANISM, iterations outside [4096, 16384] UNACCEPTABLE_CREDENTIAL, an
empty name UNACCEPTABLE_CREDENTIAL, a user named twice in one request
DUPLICATE_RESOURCE, deleting a credential that is not there RESOURCE_NOT_FOUND; a user
nothing is stored for is RESOURCE_NOT_FOUND in Describe.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from replog.protocol.apis import ApiKey, make, nested
from replog.security import sasl
from replog.server.handlers.context import NO_THROTTLE, response_class
from replog.server.network import RequestContext

if TYPE_CHECKING:
    from replog.zk.client import KafkaZkClient

BY_CODE = {code: name for name, code in sasl.MECHANISM_CODES.items()}


class ScramCredentialRequests:
    """Concurrency: event loop; ZooKeeper reads and writes in threads."""

    def __init__(self, zk: KafkaZkClient) -> None:
        self.zk = zk

    async def handle_describe(self, ctx: RequestContext, request: Any) -> Any:
        cls = response_class(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ctx.api_version)
        result_cls = nested(cls, "DescribeUserScramCredentialsResult")
        info_cls = nested(cls, "CredentialInfo")
        if request.users is None:
            names = await asyncio.to_thread(self.zk.get_entity_names, "users")
            asked = False
        else:
            names = [str(u.name) for u in request.users]
            asked = True
        duplicated = {n for n, count in Counter(names).items() if count > 1}
        results = []
        for name in dict.fromkeys(names):
            if name in duplicated:
                results.append(
                    make(
                        result_cls,
                        user=name,
                        error_code=ErrorCode.duplicate_resource,
                        error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}",
                        credential_infos=(),
                    )
                )
                continue
            config = await self._config(name)
            infos = []
            for mechanism, code in sasl.MECHANISM_CODES.items():
                text = config.get(mechanism)
                if text is None:
                    continue
                try:
                    iterations = sasl.parse_credential(text).iterations
                except ValueError:
                    continue
                infos.append(make(info_cls, mechanism=code, iterations=iterations))
            if not infos:
                if asked:
                    results.append(
                        make(
                            result_cls,
                            user=name,
                            error_code=ErrorCode.resource_not_found,
                            error_message=f"Attempt to describe a user credential that does not exist: {name}",
                            credential_infos=(),
                        )
                    )
                continue
            results.append(
                make(
                    result_cls,
                    user=name,
                    error_code=ErrorCode.none,
                    error_message=None,
                    credential_infos=tuple(infos),
                )
            )
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            results=tuple(results),
        )

    async def _config(self, name: str) -> dict[str, str]:
        try:
            config, _ = await asyncio.to_thread(self.zk.get_entity_config, "users", name)
        except ValueError:
            return {}
        return config

    async def handle_alter(self, ctx: RequestContext, request: Any) -> Any:
        cls = response_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ctx.api_version)
        result_cls = nested(cls, "AlterUserScramCredentialsResult")
        names = [str(d.name) for d in request.deletions] + [str(u.name) for u in request.upsertions]
        counts = Counter(names)
        errors: dict[str, tuple[ErrorCode, str]] = {}
        changes: dict[str, dict[str, str | None]] = {}
        for d in request.deletions:
            name, mechanism = str(d.name), BY_CODE.get(int(d.mechanism))
            error = self._check(name, mechanism, counts)
            if error is not None:
                errors.setdefault(name, error)
                continue
            changes.setdefault(name, {})[mechanism] = None
        for u in request.upsertions:
            name, mechanism = str(u.name), BY_CODE.get(int(u.mechanism))
            error = self._check(name, mechanism, counts)
            iterations = int(u.iterations)
            if error is None and not sasl.MIN_ITERATIONS <= iterations <= sasl.MAX_ITERATIONS:
                error = (
                    ErrorCode.unacceptable_credential,
                    f"Iterations {iterations} must be between {sasl.MIN_ITERATIONS} and {sasl.MAX_ITERATIONS}",
                )
            if error is not None:
                errors.setdefault(name, error)
                continue
            credential = sasl.credential_from_salted_password(
                mechanism, bytes(u.salted_password), bytes(u.salt), iterations
            )
            changes.setdefault(name, {})[mechanism] = sasl.format_credential(credential)
        for name, change in changes.items():
            if name in errors:
                continue
            error = await self._apply(name, change)
            if error is not None:
                errors[name] = error
        results = tuple(
            make(
                result_cls,
                user=name,
                error_code=errors.get(name, (ErrorCode.none, None))[0],
                error_message=errors.get(name, (ErrorCode.none, None))[1],
            )
            for name in dict.fromkeys(names)
        )
        return make(cls, throttle_time=NO_THROTTLE, results=results)

    @staticmethod
    def _check(name: str, mechanism: str | None, counts: Counter) -> tuple[ErrorCode, str] | None:
        if not name:
            return ErrorCode.unacceptable_credential, "Username must not be empty"
        if mechanism is None:
            return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
        if counts[name] > 1:
            return (
                ErrorCode.duplicate_resource,
                f"A user credential cannot be altered twice in the same request: {name}",
            )
        return None

    async def _apply(
        self, name: str, change: dict[str, str | None]
    ) -> tuple[ErrorCode, str] | None:
        def write() -> tuple[ErrorCode, str] | None:
            try:
                config, version = self.zk.get_entity_config("users", name)
            except ValueError:
                return ErrorCode.unacceptable_credential, f"Bad user name {name!r}"
            updated = dict(config)
            for mechanism, value in change.items():
                if value is None:
                    if mechanism not in updated:
                        return (
                            ErrorCode.resource_not_found,
                            f"Attempt to delete a user credential that does not exist: {name}",
                        )
                    del updated[mechanism]
                else:
                    updated[mechanism] = value
            self.zk.change_entity_config("users", name, updated, version)
            return None

        return await asyncio.to_thread(write)
