"""Run the real `__main__.py` under Pulumi's mock runtime and record every registration.

Waiting for registrations is done the way the SDK's own entry points do it
(`pulumi.runtime.stack.run_in_stack` for the language host, `pulumi.runtime.test` for unit
tests): the program runs inside `run_pulumi_func`, which afterwards awaits `wait_for_rpcs()` —
every outstanding RPC in `SETTINGS.rpc_manager.rpcs` (each RegisterResource) and every pending
Output task in `SETTINGS.outputs`, repeating until both are empty — and re-raises the first
exception of the program, of an RPC or of an apply callback.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import runpy
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pulumi
import yaml
from google.protobuf import struct_pb2
from pulumi.runtime import mocks as _mocks
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.rpc import UNKNOWN

from .normalize import SECRET_SIG, SIG_KEY, is_secret, struct_to_py
from .stackconfig import StackConfig

T = TypeVar("T")


@dataclass(slots=True)
class Registration:
    """One RegisterResource request, as the engine would receive it."""

    urn: str
    type: str
    name: str
    parent: str | None
    custom: bool
    inputs: dict[str, Any]  # wire shape: camelCase keys, floats, secret markers, unknowns
    protect: bool
    retain_on_delete: bool
    delete_before_replace: bool
    depends_on: list[str]
    property_dependencies: dict[str, list[str]]
    additional_secret_outputs: list[str]
    ignore_changes: list[str]
    replace_on_changes: list[str]
    provider: str | None
    aliases: list[str] = field(default_factory=list)

    def options(self) -> dict[str, Any]:
        return {
            "protect": self.protect,
            "retainOnDelete": self.retain_on_delete,
            "deleteBeforeReplace": self.delete_before_replace,
            "dependsOn": self.depends_on,
            "additionalSecretOutputs": self.additional_secret_outputs,
            "ignoreChanges": self.ignore_changes,
            "replaceOnChanges": self.replace_on_changes,
            "provider": self.provider,
        }


def _provider_urn(ref: str) -> str | None:
    # A provider reference is "<urn>::<id>"; the id is a mock artefact, the URN is the identity.
    if not ref:
        return None
    urn, sep, _ = ref.rpartition("::")
    return urn if sep else ref


def backend_url(project_dir: Path) -> str | None:
    """The backend `pulumi` would use here, as the CLI picks it: PULUMI_BACKEND_URL, else the
    project's `backend.url`, else the one `pulumi login` last chose."""
    if url := os.environ.get("PULUMI_BACKEND_URL"):
        return url
    try:
        project = yaml.safe_load((project_dir / "Pulumi.yaml").read_text()) or {}
        backend = project.get("backend") if isinstance(project, Mapping) else None
        if isinstance(backend, Mapping) and isinstance(backend.get("url"), str):
            return str(backend["url"])
        home = Path(os.environ.get("PULUMI_HOME") or Path.home() / ".pulumi")
        current = json.loads((home / "credentials.json").read_text()).get("current")
        return current if isinstance(current, str) else None
    except (OSError, ValueError, AttributeError):
        return None


def backend_organization(project_dir: Path) -> str | None:
    """This stack's organization where it is certain offline: on a DIY backend (file://, s3://,
    gs://, azblob://, postgres://) always the literal `organization`; on Pulumi Cloud the
    user's, which only the engine knows (None)."""
    url = backend_url(project_dir)
    return "organization" if url and not url.startswith(("https://", "http://")) else None


STACK_REFERENCE = "pulumi:pulumi:StackReference"
OUTPUTS_FILE = "outputs.json"


class OfflineMocks(_mocks.Mocks):
    """Ids are `<name>-id`; outputs are the inputs plus the outputs programs read in preview.

    `args.inputs` is the wire-shaped dict (see normalize.py), not the SDK-deserialised one, so the
    returned state can be put back on the wire without another serialisation pass.
    """

    # Outputs a command has only once it ran, which programs read (a reboot check's verdict,
    # a kubeconfig). On a first preview they are unknown, as the engine plans them, and so is
    # whatever the program computes from them. A stack with a rendering has been deployed:
    # the engine reads them from its state; they stand in as empty here.
    COMMAND_OUTPUTS = ("stdout", "stderr")
    COMMANDS = ("command:remote:Command", "command:local:Command")

    def __init__(self, build_dir: Path | None = None, deployed: bool = True,
                 stack: str | None = None) -> None:
        self.build_dir = build_dir  # build/: where referenced stacks' outputs are read
        self.stack = stack  # the stack being previewed
        value = "" if deployed else UNKNOWN
        self.extra_outputs = {t: dict.fromkeys(self.COMMAND_OUTPUTS, value)
                              for t in self.COMMANDS}

    def stack_reference(self, name: str) -> dict[str, Any]:
        """A referenced stack's outputs as its last offline preview recorded them
        (`build/<stack>/outputs.json`), standing in for what `pulumi up` left in its state;
        none when it has no preview. A secret has no value offline: the kubeconfig stands in
        as one for the API server the stack says it runs (`site.apiEndpoint`)."""
        # Its own outputs (what it deployed last, components/wiring/deployed.py) are none:
        # build/ has its last preview's, not what is deployed, and the preview judges its
        # refusals itself against the rendering of what is deployed (exit 4).
        own = name.rpartition("/")[2] == self.stack
        path = self.build_dir / name.rpartition("/")[2] / OUTPUTS_FILE \
            if self.build_dir and not own else None
        if path is None or not path.is_file():
            return {"name": name, "outputs": {}, "secretOutputNames": []}
        recorded = json.loads(path.read_text())
        outputs = dict(recorded.get("outputs") or {})
        secret = sorted(recorded.get("secretOutputNames") or [])
        for key in secret:
            outputs[key] = f"offline-stack-reference-{key}"
        if "kubeconfig" in secret:
            server = (outputs.get("site") or {}).get("apiEndpoint") or "https://offline"
            outputs["kubeconfig"] = json.dumps({
                "apiVersion": "v1", "kind": "Config",
                "clusters": [{"name": "offline-stand-in", "cluster": {"server": server}}]})
        return {"name": name, "outputs": outputs, "secretOutputNames": secret}

    def new_resource(self, args: _mocks.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        if args.typ == STACK_REFERENCE:
            return str(args.inputs.get("name")), self.stack_reference(str(args.inputs["name"]))
        extra = self.extra_outputs.get(args.typ)
        state = {**extra, **args.inputs} if extra else args.inputs
        return f"{args.name}-id", state

    def call(self, args: _mocks.MockCallArgs) -> dict[str, Any]:  # type: ignore[override]
        # A plain dict: MockMonitor.Invoke reads a tuple's second item as a list of failures.
        return {}


class DefaultProviderDisabled(RuntimeError):
    pass


class RecordingMonitor(_mocks.MockMonitor):
    """Captures every RegisterResource request (custom resources and components alike)."""

    mocks: OfflineMocks  # whose ids are always strings

    def __init__(self, mocks: OfflineMocks, disabled_default_providers: frozenset[str],
                 on_register: Callable[[Registration], None] | None = None) -> None:
        super().__init__(mocks)
        self.registrations: list[Registration] = []
        self._disabled = disabled_default_providers
        self._on_register = on_register
        self._lock = threading.Lock()  # RPCs arrive on the SDK's executor threads

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        """The URN the engine gives (sdk/go/common/resource/urn/urn.go `New`): the parent's
        whole qualified type before the resource's own, none for a child of the root stack.
        The SDK's mock monitor keeps only the parent's last type and prefixes the root stack's,
        so URNs printed from there would not work with `pulumi up --target` or `--replace`."""
        if parent:
            qualified = parent.split("::")[2]
            if qualified != "pulumi:pulumi:Stack":
                type_ = f"{qualified}${type_}"
        return "urn:pulumi:" + "::".join([pulumi.get_stack(), pulumi.get_project(), type_, name])

    def RegisterResource(self, request: Any) -> Any:  # the gRPC method's name
        urn = self.make_urn(request.parent, request.type, request.name)
        if request.type == "pulumi:pulumi:Stack":
            return resource_pb2.RegisterResourceResponse(urn=urn)
        provider = _provider_urn(request.provider)
        if (
            request.custom
            and provider is None
            and not request.type.startswith("pulumi:providers:")
            and self._disabled
        ):
            pkg = request.type.split(":", 1)[0]
            if "*" in self._disabled or pkg in self._disabled:
                # Same check and wording as the engine, which the mocks do not emulate.
                raise DefaultProviderDisabled(
                    f"Default provider for '{pkg}' disabled. '{urn}' must use an explicit provider."
                )
        inputs = struct_to_py(request.object)
        reg = Registration(
            urn=urn,
            type=request.type,
            name=request.name,
            parent=request.parent or None,
            custom=bool(request.custom),
            inputs=inputs,
            protect=bool(request.protect),
            retain_on_delete=bool(request.retainOnDelete),
            delete_before_replace=bool(request.deleteBeforeReplace),
            depends_on=sorted(set(request.dependencies)),
            property_dependencies={
                k: sorted(v.urns) for k, v in request.propertyDependencies.items() if v.urns
            },
            additional_secret_outputs=sorted(request.additionalSecretOutputs),
            ignore_changes=sorted(request.ignoreChanges),
            replace_on_changes=sorted(request.replaceOnChanges),
            provider=provider,
            aliases=sorted(request.aliasURNs),
        )
        id_, state = self.mocks.new_resource(
            _mocks.MockResourceArgs(
                typ=request.type,
                name=request.name,
                inputs=inputs,
                provider=request.provider,
                resource_id=request.importId,
                custom=reg.custom,
            )
        )
        asos = request.additionalSecretOutputs
        if asos:
            # The engine marks these outputs secret; the mock runtime does not, so do it here.
            state = dict(state)
            for key in asos:
                if key in state and not is_secret(state[key]):
                    state[key] = {SIG_KEY: SECRET_SIG, "value": state[key]}
        obj = request.object
        if state is not inputs:
            # Copy the wire struct and set only what differs: re-encoding the whole state would
            # walk every large input (scripts, chart values) a second time.
            obj = struct_pb2.Struct()
            obj.CopyFrom(request.object)
            changed = {k: v for k, v in state.items() if k not in inputs or inputs[k] is not v}
            if changed:
                obj.update(changed)
        with self._lock:
            self.registrations.append(reg)
            self.resources[urn] = _mocks.MockMonitor.ResourceRegistration(urn, id_, state)
            if self._on_register is not None:
                self._on_register(reg)
        return resource_pb2.RegisterResourceResponse(
            urn=urn, id=id_ if reg.custom else "", object=obj
        )


class ProgramFailed(Exception):
    """The program raised; `error` is the original exception."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class RunResult:
    registrations: list[Registration]
    globals: dict[str, Any]
    outputs: dict[str, Any] = field(default_factory=dict)  # wire shape: secrets marked


def _disabled_providers(config: Mapping[str, str]) -> frozenset[str]:
    raw = config.get("pulumi:disable-default-providers")
    if not raw:
        return frozenset()
    try:
        value = json.loads(raw)
    except ValueError:
        value = [raw]
    return frozenset(str(v) for v in (value if isinstance(value, list) else [value]))


def _without_source_positions() -> None:
    """The SDK sends the engine each resource's stack trace, read line by line from the
    program's source, to show where it was declared; the recording monitor has no use for it,
    and at a thousand nodes it is a tenth of the preview."""
    from pulumi.runtime import resource as sdk_resource
    from pulumi.runtime.proto import source_pb2

    sdk_resource._get_stack_trace = source_pb2.StackTrace


def cycle_check() -> Callable[[pulumi.Resource, pulumi.Resource], bool]:
    """The SDK's `declare_dependency`, walking only when a cycle is possible.

    The SDK refuses a `depends_on` edge that would close a cycle: before recording `a -> b` it
    walks everything reachable from `b` looking for `a` (pulumi/runtime/resource_cycle_breaker.py),
    which at a thousand nodes is a sixth of the program. `a` is reachable from `b` only if it
    is `b` or something already depends on it, and a resource being registered almost never
    is: this walks (with the SDK's own walk) only then, so its verdict is the SDK's every time.
    It adds an edge in place, where the SDK copies the resource's whole set per edge."""
    from pulumi.runtime import resource_cycle_breaker as breaker

    depended_on: set[pulumi.Resource] = set()  # every resource an edge points to (by identity)

    def declare_dependency(from_resource: pulumi.Resource, to_resource: pulumi.Resource) -> bool:
        if from_resource is to_resource or (
                from_resource in depended_on and breaker._reachable(to_resource, from_resource)):
            return False
        edges = getattr(from_resource, breaker._DEPENDENCIES_PROPERTY, None)
        if edges is None:
            setattr(from_resource, breaker._DEPENDENCIES_PROPERTY, {to_resource})
        else:
            edges.add(to_resource)
        depended_on.add(to_resource)
        return True

    return declare_dependency


def _cycle_check_only_where_one_can_close() -> None:
    from pulumi.runtime import rpc  # where `_add_dependency` looks the check up

    rpc.declare_dependency = cycle_check()  # type: ignore[assignment]  # a closure for a def


class _InlineLoop(asyncio.SelectorEventLoop):
    """An event loop that runs `run_in_executor` work at once, on the loop's own thread.

    The SDK hands every monitor call (RegisterResource, Invoke, ...) to a thread pool so that a
    gRPC round trip does not block the loop. The recording monitor answers from memory, so the
    hop cost more than the call (a thread switch and a wake-up of the loop per resource), and
    without it the program leaves no threads behind."""

    def run_in_executor(  # type: ignore[override]
            self, executor: Any, func: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        future: asyncio.Future[T] = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as err:  # delivered to the awaiting coroutine, as the pool does
            future.set_exception(err)
        return future


def run_program(
    project_dir: Path,
    stack_config: StackConfig,
    main: str = "__main__.py",
    timeout: float | None = None,
    deployed: bool = True,
    on_register: Callable[[Registration], None] | None = None,
) -> RunResult:
    """Run the project's program once in this process (the Pulumi runtime is process-global).
    `deployed`: as a preview of a stack `pulumi up` has built (False: its first preview);
    `on_register` is handed each registration as it is made."""
    import pulumi
    from pulumi.runtime.stack import run_pulumi_func

    project_dir = project_dir.resolve()
    os.chdir(project_dir)
    if str(project_dir) not in sys.path:
        sys.path.insert(0, str(project_dir))

    loop = _InlineLoop()
    asyncio.set_event_loop(loop)
    loop_errors: list[BaseException] = []

    def on_loop_error(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        # An exception in a task nobody awaits would otherwise only be logged.
        exc = context.get("exception")
        loop_errors.append(exc if exc is not None else RuntimeError(context.get("message")))

    loop.set_exception_handler(on_loop_error)

    mocks = OfflineMocks(project_dir / "build", deployed, stack_config.stack)
    monitor = RecordingMonitor(mocks, _disabled_providers(stack_config.config), on_register)
    pulumi.runtime.set_mocks(
        mocks,
        project=stack_config.project,
        stack=stack_config.stack,
        preview=True,
        monitor=monitor,
        organization=backend_organization(project_dir),
    )
    pulumi.runtime.set_all_config(stack_config.config, stack_config.secret_keys)
    _without_source_positions()
    _cycle_check_only_where_one_can_close()
    collector = gc.isenabled(), gc.get_threshold()  # the program may tune it for its process

    program_globals: dict[str, Any] = {}

    def program() -> None:
        program_globals.update(runpy.run_path(str(project_dir / main), run_name="__main__"))

    coro = run_pulumi_func(program)
    outputs: dict[str, Any] = {}
    try:
        loop.run_until_complete(asyncio.wait_for(coro, timeout) if timeout else coro)
        outputs = loop.run_until_complete(_exports())
    except TimeoutError:
        raise ProgramFailed(
            TimeoutError(
                f"the program did not finish within {timeout:g}s (an Output never resolved?)"
            )
        ) from None
    except BaseException as err:  # classified by the caller
        raise ProgramFailed(err) from err
    finally:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()
        # What the program built stays out of the collector's passes, as in its own process.
        gc.freeze()
        gc.set_threshold(*collector[1])
        if collector[0]:
            gc.enable()
    if loop_errors:
        raise ProgramFailed(loop_errors[0])
    return RunResult(monitor.registrations, program_globals, outputs)


async def _exports() -> dict[str, Any]:
    """What the program exported (`pulumi.export`), resolved, each secret one marked. The mock
    runtime registers the stack's outputs before the program runs, so they are read from the
    root stack resource afterwards."""
    import pulumi
    from pulumi.runtime.settings import get_root_resource

    root = get_root_resource()
    found: dict[str, Any] = {}
    for name, value in sorted(getattr(root, "outputs", {}).items()):
        output = pulumi.Output.from_input(value)
        resolved = await output.future()
        found[name] = {SIG_KEY: SECRET_SIG, "value": resolved} if await output.is_secret() \
            else resolved
    return found
