"""The training monitor: the only writer of a training session's metrics.

Invariant: every value the monitor records is computed by the monitor from tensors it observed
through its own hooks (activation modules, the loss module, the optimizer's step) or from passes
it runs itself (validation, the probe batch) with its hooks paused. No method takes a metric
value: the training loop only trains and calls `end_epoch()`.

It records under its own recorder (its own principal) on the metrics stream of the agent's
session; the agent's `Session` then lists the metrics stream at its end, so the processors wait
for both chains before judging.

What a step costs: hooks launch device operations and keep Python integers from shapes; nothing
is read back to the host until `end_epoch` (see _stats.py). Hooks only count while the model is
in training mode with gradients enabled, so a validation pass of the training code's own does not
leak into training statistics either.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, Literal, Self

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from rolltape.producers._errors import MonitorError
from rolltape.producers._recorder import Recorder
from rolltape.producers._session import Session
from rolltape.producers.training._kinds import activation_kind
from rolltape.producers.training._spec import layers_of, model_spec
from rolltape.producers.training._stats import (
    ActivationStats,
    EpochGradients,
    GradientStats,
    LossStats,
    observe_outputs,
)
from rolltape.schemas import LayerSpec, LiveCheck, Metric, ModelSpec, Stream

_METRICS = Stream.METRICS.value
_PENDING_LIMIT = 512
"""Calls set aside before they are measured anyway (a loop that never calls the loss)."""
Batch = tuple[Tensor, Tensor]


class MonitorConfig(BaseModel):
    """How the monitor measures (see docs/training-monitor.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    saturation_slope: float = Field(default=1e-3, gt=0)
    """A smooth activation's input is saturated where the activation's slope is below this."""
    percentile_sample: int = Field(default=64, ge=1)
    """Output values sampled per activation module per forward pass for p50/p99."""
    percentile_slots: int = Field(default=256, ge=1)
    """Samples kept per activation module (the epoch's most recent ones)."""
    unit_stride: int = Field(default=4, ge=1)
    """Dead and saturated units are counted on every call of an activation module, over every
    this-many-th sample of its batch (rotating, see ActivationStats); 1 checks every sample."""
    percentile_every: int = Field(default=4, ge=1)
    """An activation module's output is sampled for the percentiles on every this many of its
    calls (1024 calls fill the 256 slots); its dead or saturated units are counted on every
    call. The percentiles are recorded for people to read: no rule reads them."""
    probe_samples: int = Field(default=256, ge=1)
    """Size of the fixed held-out probe batch (taken from the start of the val loader)."""
    noise_scale_simple: bool = False
    """Also estimate McCandlish's B_simple: one more copy of the parameters and three more
    operations per step (the previous step's gradient is kept to pair it with the next)."""
    keep_best_checkpoint: bool = True
    """Keep the weights of the best-validation epoch on the device, for `restore_best`."""


class _LossModule(nn.Module):
    """A plain loss function as a module, so the monitor can hook it like nn.CrossEntropyLoss."""

    def __init__(self, fn: Callable[[Tensor, Tensor], Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, output: Tensor, target: Tensor) -> Tensor:
        return self.fn(output, target)


class _Hooked:
    def __init__(self, name: str, stats: ActivationStats, handles: list[RemovableHandle]) -> None:
        self.name = name
        self.stats = stats
        self.handles = handles

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


class TrainingMonitor:
    """Hooks a live torch model and records its diagnostics, one metric event per epoch.

        with TrainingMonitor(monitor_recorder, session) as monitor:
            monitor.attach(model, optimizer, loss_fn, train_loader, val_loader)
            for epoch in range(epochs):
                for x, y in train_loader:
                    optimizer.zero_grad()
                    loss = monitor.loss_fn(model(x), y)
                    loss.backward()
                    optimizer.step()
                monitor.end_epoch()

    `recorder` must be the monitor's own (its principal), not the session's.
    """

    def __init__(
        self, recorder: Recorder, session: Session, *, config: MonitorConfig | None = None
    ) -> None:
        if recorder is session._recorder:
            raise MonitorError(
                "the monitor records under its own principal: give it a Recorder of its own "
                "(rolltape.infra.open_monitor_recorder()), not the session's"
            )
        self.config = config or MonitorConfig()
        self.session_id = session.session_id
        self._recorder = recorder
        session._expect(_METRICS)
        self._epoch = 0
        self._weights_epoch: int | None = None
        self._finished = False
        self._live: LiveCheck | None = None
        self._paused = False
        self._dirty = False
        self._model: nn.Module | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._loss_module: nn.Module | None = None
        self._reduction = "mean"
        self._train_loader: Iterable[Any] | None = None
        self._val_loader: Iterable[Any] | None = None
        self._probe: Batch | None = None
        self._layers: tuple[LayerSpec, ...] = ()
        self._pending: list[tuple[ActivationStats, Tensor]] = []
        """ReLU-family calls of the forward pass under way, measured at its loss."""
        self._activations: dict[nn.Module, _Hooked] = {}
        """Keyed by the module itself, not its id: a module swapped out may be freed and its id
        reused by the module that replaced it."""
        self._handles: list[RemovableHandle] = []
        self._grads: GradientStats | None = None
        self._loss = LossStats()
        self._best: tuple[int, float, dict[str, Tensor] | None] | None = None

    # -- the loop's side --------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch being trained (0-based): the number of epochs the monitor has measured."""
        return self._epoch

    @property
    def loss_fn(self) -> Callable[[Tensor, Tensor], Tensor]:
        """The loss the training loop must call: the module handed to `attach`, hooked (a plain
        function is wrapped in a module)."""
        if self._loss_module is None:
            raise MonitorError("attach() the model first")
        return self._loss_module

    @property
    def model(self) -> nn.Module:
        if self._model is None:
            raise MonitorError("attach() the model first")
        return self._model

    def attach(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: nn.Module | Callable[[Tensor, Tensor], Tensor],
        train_loader: Iterable[Any] | None = None,
        val_loader: Iterable[Any] | None = None,
        *,
        probe: Batch | None = None,
    ) -> None:
        """Hook `model`, `optimizer` and `loss_fn`. Called again with a new model (a restart
        from an edited spec) it moves every hook to the new parts and records the new model;
        the epoch count, the probe batch and the best checkpoint carry over."""
        if self._finished:
            raise MonitorError("the monitor has finished; create a new one for a new session")
        if not isinstance(model, nn.Module) or not isinstance(optimizer, torch.optim.Optimizer):
            raise MonitorError("attach(model, optimizer, ...) takes an nn.Module and an Optimizer")
        self._remove_hooks()
        self._model, self._optimizer = model, optimizer
        self._train_loader, self._val_loader = train_loader, val_loader or self._val_loader
        if isinstance(loss_fn, nn.Module):
            self._loss_module = loss_fn
        elif callable(loss_fn):
            self._loss_module = _LossModule(loss_fn)
        else:
            raise MonitorError("loss_fn must be an nn.Module or a function (output, target)")
        self._reduction = str(getattr(self._loss_module, "reduction", "mean"))
        if self._probe is None:
            self._probe = probe or self._take_probe()
        self._grads = self._gradient_stats()
        self._loss.reset()
        self._handles = [
            model.register_forward_pre_hook(self._before_forward),
            self._loss_module.register_forward_hook(self._on_loss),
            optimizer.register_step_pre_hook(self._before_step),
            optimizer.register_step_post_hook(self._after_step),
            nn.modules.module.register_module_module_registration_hook(self._on_register),
        ]
        self._sync(record=False)
        spec = model_spec(model, self._epoch, "attach", with_digest=True)
        self._layers = spec.layers
        self._record("model_spec", spec)

    def _gradient_stats(self) -> GradientStats:
        """Accumulators over the optimizer's parameters, named as the model names them."""
        assert self._model is not None and self._optimizer is not None
        names = {id(p): n for n, p in self._model.named_parameters()}
        groups = self._optimizer.param_groups
        params = [p for group in groups for p in group["params"]]
        labels = [
            names.get(id(p), f"param_groups[{g}][{i}]")
            for g, group in enumerate(groups)
            for i, p in enumerate(group["params"])
        ]
        return GradientStats(params, labels, self.config.noise_scale_simple)

    def end_epoch(self) -> Metric:
        """Measure the epoch that just ended, record it, and start the next one. Returns the
        recorded metric (a read-only copy)."""
        grads = self._grads
        if self._model is None or grads is None:
            raise MonitorError("attach() the model first")
        self._measure_pending()
        self._sync(record=True)
        values = self._gather()
        steps, loss = grads.steps, self._loss
        gradients = (
            EpochGradients.from_host(grads, values["grads"], loss.samples) if steps else None
        )
        val_loss, val_acc = self._validate()
        probe_loss, probe_norms = self._probe_pass()
        activations = values["activations"]
        dead = {name: v[0] for name, (relu, v) in activations.items() if relu}
        saturated = {name: v[0] for name, (relu, v) in activations.items() if not relu}
        pooled = values["pooled"]
        lr = self._optimizer.param_groups[0]["lr"] if self._optimizer else None
        batch_size = loss.largest_batch or getattr(self._train_loader, "batch_size", None)
        metric = Metric(
            epoch=self._epoch,
            steps=steps,
            train_loss=values["loss"][0] / loss.samples if loss.samples else None,
            val_loss=val_loss,
            train_acc=values["loss"][1] / loss.scored_samples if loss.scored_samples else None,
            val_acc=val_acc,
            max_layer_grad_norm=gradients.max_norm if gradients else None,
            min_layer_grad_norm=gradients.min_norm if gradients else None,
            per_layer_grad_norm=gradients.per_param if gradients else {},
            dead_relu_fraction=max(dead.values(), key=_nan_high) if dead else None,
            update_to_param_ratio=gradients.update_ratio if gradients else None,
            grad_noise_scale=gradients.noise_scale if gradients else None,
            lr=float(lr) if lr is not None else None,
            batch_size=batch_size if isinstance(batch_size, int) and batch_size > 0 else None,
            samples=loss.samples,
            dead_relu_per_module=dead,
            saturated_fraction=max(saturated.values(), key=_nan_high) if saturated else None,
            saturated_per_module=saturated,
            activation_p50=_finite_or_none(pooled[0]) if pooled else None,
            activation_p99=_finite_or_none(pooled[1]) if pooled else None,
            grad_noise_scale_simple=gradients.noise_scale_simple if gradients else None,
            probe_loss=probe_loss,
            probe_grad_norm=probe_norms,
        )
        if steps and val_loss is not None and math.isfinite(val_loss):
            self._keep_if_best(val_loss)
        self._weights_epoch = self._epoch
        self._record("metric", metric)
        grads.reset()
        if [id(p) for g in self._optimizer.param_groups for p in g["params"]] != [  # type: ignore[union-attr]
            id(p) for p in grads.params
        ]:
            self._grads = self._gradient_stats()  # a parameter group was added: measure it too
        loss.reset()
        for hooked in self._activations.values():
            hooked.stats.reset()
        self._epoch += 1
        return metric

    def restore_best(self) -> int:
        """Load the weights of the epoch with the lowest validation loss (an early stop) and
        return that epoch; the live check then compares with that epoch's probe."""
        if self._best is None or self._best[2] is None:
            raise MonitorError(
                "no best checkpoint to restore: no epoch with a finite validation loss was "
                "measured (or keep_best_checkpoint is off)"
            )
        epoch, _, state = self._best
        assert state is not None
        try:
            self.model.load_state_dict(state)
        except RuntimeError as exc:
            raise MonitorError(
                f"the best checkpoint (epoch {epoch}) does not fit the current model, which was "
                f"restarted from an edited spec since: {str(exc).splitlines()[0]}"
            ) from exc
        self._weights_epoch = epoch
        return epoch

    def finish(
        self,
        status: Literal["completed", "interrupted", "failed"] = "completed",
        *,
        error: str | None = None,
    ) -> LiveCheck | None:
        """Record the final model and, for a completed run, the live check; end the metrics
        chain and remove every hook. Idempotent."""
        if self._finished:
            return self._live
        try:
            if self._model is not None:
                self._sync(record=True)
                self._record(
                    "model_spec", model_spec(self._model, self._epoch, "final", with_digest=True)
                )
                if status == "completed" and self._weights_epoch is not None:
                    self._live = self._live_check()
                    self._record("live_check", self._live)
        finally:
            self._finished = True
            self._remove_hooks()
            self._recorder._enqueue(
                self.session_id,
                _METRICS,
                "session_ended",
                {"status": status, "outcome": {}, "error": error, "streams": []},
            )
        return self._live

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.finish("completed")
        elif isinstance(exc, KeyboardInterrupt):
            self.finish("interrupted", error=type(exc).__name__)
        else:
            self.finish("failed", error=f"{type(exc).__name__}: {exc}")

    # -- hooks ----------------------------------------------------------------------------------
    def _counting(self) -> bool:
        model = self._model
        return not self._paused and torch.is_grad_enabled() and model is not None and model.training

    def _before_forward(self, module: nn.Module, args: Any) -> None:
        if self._dirty and not self._paused:
            self._sync(record=True)

    def _on_register(self, parent: nn.Module, name: str, child: nn.Module | None) -> None:
        self._dirty = True  # cheap: the next forward (or end_epoch) re-syncs the hooks

    def _on_loss(self, module: nn.Module, inputs: Any, output: Any) -> None:
        if self._pending:
            self._measure_pending()
        if (
            self._counting()
            and isinstance(output, Tensor)
            and len(inputs) >= 2
            and isinstance(inputs[0], Tensor)
            and isinstance(inputs[1], Tensor)
        ):
            self._loss.observe(inputs[0], inputs[1], output, self._reduction)

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._pending:
            self._measure_pending()
        if not self._paused and self._grads is not None:
            self._grads.before_step()

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self._paused and self._grads is not None:
            self._grads.after_step()

    def _measure_pending(self) -> None:
        """Measure the ReLU-family outputs set aside during the forward pass, on the training's
        own stream. (A stream of the monitor's own was tried on an H200: ResNet-18's step
        cost 7.4% more with it, 4.3% without.)"""
        observe_outputs(self._pending)

    def _activation_hooks(self, name: str, module: nn.Module) -> _Hooked:
        config = self.config
        with self._pause():
            stats = ActivationStats(
                name,
                module,
                slope_below=config.saturation_slope,
                sample=config.percentile_sample,
                slots=config.percentile_slots,
                every=config.percentile_every,
                stride=config.unit_stride,
            )
        handles = []
        if not stats.relu and getattr(module, "inplace", False):
            # the output overwrites the input: count saturation on the input before it runs
            def before(m: nn.Module, inputs: Any) -> None:
                if self._counting() and inputs and isinstance(inputs[0], Tensor):
                    stats.count(inputs[0])

            def after(m: nn.Module, inputs: Any, output: Any) -> None:
                if self._counting() and isinstance(output, Tensor):
                    stats.sample(output)

            handles.append(module.register_forward_pre_hook(before))
        elif stats.relu:
            pending = self._pending

            def after(m: nn.Module, inputs: Any, output: Any) -> None:
                if self._counting() and isinstance(output, Tensor):
                    pending.append((stats, output))  # measured at the loss (observe_outputs)
                    if len(pending) > _PENDING_LIMIT:
                        self._measure_pending()
        else:

            def after(m: nn.Module, inputs: Any, output: Any) -> None:
                if self._counting() and isinstance(output, Tensor):
                    if inputs and isinstance(inputs[0], Tensor):
                        stats.observe(inputs[0], output)
                    else:
                        stats.sample(output)

        handles.append(module.register_forward_hook(after))
        return _Hooked(name, stats, handles)

    def _sync(self, *, record: bool) -> None:
        """Hooks follow the model: hook activation modules that appeared, unhook those that are
        gone, and record the new structure when it changed."""
        self._dirty = False
        model = self._model
        if model is None:
            return
        present = {m: name for name, m in model.named_modules() if activation_kind(m) is not None}
        for gone in [m for m in self._activations if m not in present]:
            self._activations.pop(gone).remove()
        for module, name in present.items():
            hooked = self._activations.get(module)
            if hooked is None:
                self._activations[module] = self._activation_hooks(name, module)
            else:
                hooked.name = hooked.stats.name = name
        if record:
            layers = layers_of(model)
            if layers != self._layers:
                self._layers = layers
                self._record(
                    "model_spec", model_spec(model, self._epoch, "changed", with_digest=False)
                )

    def _remove_hooks(self) -> None:
        self._pending.clear()  # a forward pass cut short (a restart, the end): not a step
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for hooked in self._activations.values():
            hooked.remove()
        self._activations = {}

    @contextlib.contextmanager
    def _pause(self) -> Iterator[None]:
        paused, self._paused = self._paused, True
        try:
            yield
        finally:
            self._paused = paused

    # -- measurements at the epoch's end ----------------------------------------------------------
    def _gather(self) -> dict[str, Any]:
        """Every device accumulator of the epoch in one host copy."""
        grads = self._grads
        assert grads is not None
        parts: list[Tensor] = []
        sizes: list[int] = []

        def add(t: Tensor) -> None:
            flat = t.detach().reshape(-1).to(torch.float64)
            parts.append(flat)
            sizes.append(flat.numel())

        if grads.steps:
            add(grads.readout())
        order = []
        rings = []
        for hooked in self._activations.values():
            fraction = hooked.stats.fraction()
            sample = hooked.stats.samples()
            if fraction is None or sample is None:
                continue
            order.append(hooked)
            add(fraction)
            add(torch.nanquantile(sample.float(), torch.tensor([0.5, 0.99], device=sample.device)))
            rings.append(sample.float())
        if rings:
            pooled = torch.cat([r.to(rings[0].device) for r in rings])
            add(torch.nanquantile(pooled, torch.tensor([0.5, 0.99], device=pooled.device)))
        loss = self._loss
        loss_sums = loss.readout()
        if loss_sums is not None:
            add(loss_sums)
        host: list[float] = torch.cat([p.to("cpu") for p in parts]).tolist() if parts else []
        at = 0

        def take(n: int) -> list[float]:
            nonlocal at
            out = host[at : at + n]
            at += n
            return out

        out: dict[str, Any] = {"grads": [], "activations": {}, "pooled": [], "loss": [0.0, 0.0]}
        if grads.steps:
            out["grads"] = take(sizes[0])
        for hooked in order:
            share = take(1)[0]
            p50, p99 = take(2)
            out["activations"][hooked.name] = (hooked.stats.relu, (share, p50, p99))
        if rings:
            out["pooled"] = take(2)
        if loss_sums is not None:
            out["loss"] = take(2)
        return out

    def _batches(self, loader: Iterable[Any]) -> Iterator[Batch]:
        device = _device_of(self.model)
        for batch in loader:
            if not isinstance(batch, Sequence) or len(batch) < 2:
                raise MonitorError(
                    "the monitor reads (inputs, targets) batches from the val loader; got "
                    f"{type(batch).__name__}"
                )
            yield batch[0].to(device), batch[1].to(device)

    def _take_probe(self) -> Batch:
        if self._val_loader is None:
            raise MonitorError(
                "the monitor needs held-out data for validation and its probe batch: pass "
                "val_loader to attach() (or probe=(inputs, targets))"
            )
        inputs: list[Tensor] = []
        targets: list[Tensor] = []
        taken = 0
        for batch in self._val_loader:
            if not isinstance(batch, Sequence) or len(batch) < 2:
                raise MonitorError("the val loader must yield (inputs, targets) batches")
            inputs.append(batch[0].detach().clone())
            targets.append(batch[1].detach().clone())
            taken += int(batch[0].shape[0])
            if taken >= self.config.probe_samples:
                break
        if not inputs:
            raise MonitorError("the val loader yielded no batch for the probe")
        n = self.config.probe_samples
        return torch.cat(inputs)[:n], torch.cat(targets)[:n]

    def _validate(self) -> tuple[float | None, float | None]:
        if self._val_loader is None:
            return None, None
        stats = LossStats()
        model = self.model
        with self._pause(), torch.no_grad(), _eval(model):
            for x, y in self._batches(self._val_loader):
                out = model(x)
                stats.observe(out, y, self.loss_fn(out, y), self._reduction)
        sums = stats.readout()
        if sums is None:
            return None, None
        total, correct = sums.tolist()
        scored = stats.scored_samples
        return total / stats.samples, (correct / scored if scored else None)

    def _probe_pass(self) -> tuple[float | None, dict[str, float]]:
        """Loss and per-parameter gradient norms on the fixed probe batch, in eval mode, with
        gradients computed apart from the parameters' `.grad` (training is untouched)."""
        if self._probe is None:
            return None, {}
        model = self.model
        device = _device_of(model)
        x, y = self._probe[0].to(device), self._probe[1].to(device)
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        with self._pause(), _eval(model), torch.enable_grad():
            loss = self.loss_fn(model(x), y)
            if loss.ndim:
                loss = loss.sum()
            grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
        kept = [(n, g) for (n, _), g in zip(named, grads, strict=True) if g is not None]
        if not kept:
            return float(loss.detach()), {}
        values = torch.stack(
            [loss.detach().to(torch.float64)]
            + [t.to(torch.float64) for t in torch._foreach_norm([g for _, g in kept])]
        ).tolist()
        return values[0], {n: v for (n, _), v in zip(kept, values[1:], strict=True)}

    def _keep_if_best(self, val_loss: float) -> None:
        if self._best is not None and not val_loss < self._best[1]:
            return
        state = (
            {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            if self.config.keep_best_checkpoint
            else None
        )
        self._best = (self._epoch, val_loss, state)

    def _live_check(self) -> LiveCheck:
        assert self._weights_epoch is not None and self._probe is not None
        loss, norms = self._probe_pass()
        val_loss, val_acc = self._validate()
        return LiveCheck(
            epoch=self._epoch - 1,
            weights_epoch=self._weights_epoch,
            probe_samples=int(self._probe[0].shape[0]),
            loss=loss if loss is not None else math.nan,
            per_layer_grad_norm=norms,
            val_loss=val_loss,
            val_acc=val_acc,
        )

    def _record(self, event_type: str, payload: BaseModel) -> None:
        self._recorder._enqueue(self.session_id, _METRICS, event_type, payload)


@contextlib.contextmanager
def _eval(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _device_of(model: nn.Module) -> torch.device:
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _nan_high(v: float) -> float:
    return math.inf if v != v else v


def _finite_or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None


__all__ = ["ModelSpec", "MonitorConfig", "TrainingMonitor"]
