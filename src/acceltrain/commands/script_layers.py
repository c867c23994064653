"""`acceltrain run`'s own layers of the interception (interception.SCRIPT_LAYERS), each a `layer(call, proceed)`
over the script's fit, evaluate and predict calls: KerasCalls ("script_calls": counted, a failed one judged) and
FitGuard ("script_inputs": the door, where a script's call is translated once into the library's: tensors read,
checks warned once, one device or not). run.py puts them in place around the script, beside the layers every call
of a runtime has (assembly.py: FirstFits in "autopilot", Inputs in "inputs", Trained in "trained")."""

from collections import Counter

import numpy as np

from acceltrain import checks, decisions, inputs, log
from acceltrain.inputs import arrays, kinds, streams
from acceltrain.inputs.kinds import ARRAYS, kind_of
from acceltrain.errors import AcceltrainError, UsageError


class KerasCalls:
    """Layer "script_calls" (interception.LAYERS): the script's fit, evaluate and predict calls, as it made
    them: counted, and rechecked when one fails.

    When a call raises, the script's end says whose error it is: `judge(name, nth)` runs the same script plainly in
    a fresh process up to that call (plain_check.py) and returns its Verdict, or a string saying why it did not
    run (None: no judge).
    """

    def __init__(self, runtime, plain_command: str, judge=None):
        from acceltrain.backends import interception

        self.runtime = runtime
        self.plain_command = plain_command  # how the user runs the script without acceltrain (_plain_command)
        self.judge = judge
        self.counts: Counter = Counter()
        self.undistributed: Counter = Counter()  # of those, the calls an inner layer ran on one device
        self.under_own: dict[str, Counter] = {}  # of those, the calls under the script's own distribution, by its name
        self.why_undistributed: list = []
        self._runtimes = interception.runtimes_opened()  # more at the end: the script connected its own
        self.failed: tuple | None = None  # (name, error, which of the script's calls of that name it was)
        self._depth = 0  # a callback's own predict inside a fit: only the script's outermost calls count

    def __call__(self, call, proceed):
        from acceltrain.backends import keras_internals

        outermost = self._depth == 0
        as_called = getattr(self.runtime, "as_called", None)  # None: a stand-in runtime (tests of run's layers)
        own = getattr(as_called(call.model), "words", "") if outermost and as_called is not None else ""
        self._depth += 1
        self.counts[call.name] += outermost
        before = keras_internals.variable_values(call.model) if outermost else []
        try:
            with self.runtime.watchdog.watching(f"{call.name} (compiling and running the first step)"):
                return proceed(call)  # armed from the start: Keras builds state (a collective) before any callback
        except AcceltrainError:
            raise  # acceltrain's own outcome (a fit check, a stop on SIGTERM): nothing to recheck
        except Exception as error:
            if outermost and self.failed is None:
                self.failed = (call.name, error, self.counts[call.name])  # judged once the script has ended
            keras_internals.put_back_values(before)  # a script that catches the error keeps a whole model
            raise
        finally:
            self._depth -= 1
            if outermost and call.undistributed:
                self.undistributed[call.name] += 1
                self.why_undistributed += [why.split(". ")[0] for why in call.undistributed
                                           if why.split(". ")[0] not in self.why_undistributed]
            elif own:
                self.under_own.setdefault(own, Counter())[call.name] += 1

    def tell_whose(self, error: BaseException) -> None:
        """After the script's traceback: whether the failure is the script's or acceltrain's, as the same script run
        plainly in a fresh process says (`judge`), never the half-failed process itself."""
        if self.failed is None or self.failed[1] is not error:
            log.info(f"the error was raised in the script's own code, outside fit/evaluate/predict; to see whether "
                     f"it fails without acceltrain too, run: {self.plain_command}")
            return
        name, _, nth = self.failed
        verdict = self.judge(name, nth) if self.judge is not None else None
        which = f"model.{name} (the script's call {nth} of {name})"
        if verdict is None or isinstance(verdict, str):
            why = f" ({verdict})" if verdict else ""
            log.info(f"{which} failed; not run again without acceltrain{why}. To tell whose error it is, run: "
                     f"{self.plain_command}")
        elif verdict.outcome == "passed":
            log.warn(f"{which} fails only under acceltrain: the same script run without acceltrain, in a fresh process, "
                     "makes that call and it succeeds. This is acceltrain's bug, not the script's: please report it "
                     f"with this output. The plain run: {self.plain_command}")
        elif verdict.outcome == "failed" and verdict.error_type == type(error).__name__:
            log.info(f"{which} fails the same way without acceltrain ({verdict.error_type} in the same script run "
                     "plainly, in a fresh process): the error is the script's, not acceltrain's.")
        elif verdict.outcome == "failed":
            log.info(f"{which} fails without acceltrain too, but differently ({verdict.error_type}: {verdict.message}, "
                     f"in the same script run plainly, in a fresh process): most likely the script's error; to "
                     f"compare, run: {self.plain_command}")
        elif verdict.outcome == "timed out":
            log.info(f"{which} failed; the same script run without acceltrain had not reached that call when its time "
                     f"was up, so there is no verdict. To tell whose error it is, run: {self.plain_command}")
        else:
            elsewhere = f" (it raised {verdict.error_type}: {verdict.message})" if verdict.error_type else ""
            log.info(f"{which} failed; the same script run without acceltrain, in a fresh process, never made that "
                     f"call{elsewhere}, so there is no verdict. To compare, run: {self.plain_command}")

    def tell_summary(self) -> None:
        """One line at the end: what acceltrain distributed, or that it distributed nothing, and why."""
        from acceltrain.backends import interception

        where = (f"{self.runtime.distribution_name} over {self.runtime.num_replicas} replica(s)"
                 if self.runtime.distribution is not None else "one device")
        own = ("; the calls of the runtime the script connected itself ran as its banner says"
               if interception.runtimes_opened() > self._runtimes else "")
        if self.counts:
            # Where the calls ran: the runtime's distribution, the script's own (each by its name and mesh), one device.
            theirs = sum(self.under_own.values(), Counter())
            places = [(where, self.counts - self.undistributed - theirs), *self.under_own.items(),
                      (f"one device, undistributed ({'; '.join(self.why_undistributed)})", self.undistributed)]
            (first, _), *rest = [(place, counts) for place, counts in places if +counts]
            but = ", but " + "; ".join(f"{_listed(counts)} on {place}" for place, counts in rest) if rest else ""
            log.info(f"run: the script's Keras calls ({_listed(self.counts)}) ran on {first}{but}{own}")
        elif own:
            log.info(f"run: the script called no Keras fit, evaluate or predict itself{own}")
        else:
            log.info(f"run: the script called no fit, evaluate or predict, so nothing was distributed: its models' "
                     f"variables were placed by {where}, but a hand-written training loop runs as written, each "
                     "step on the whole batch (Keras's fit/evaluate/predict are what acceltrain splits)")


def _listed(counts) -> str:
    """'2 fit, 1 evaluate': the calls counted, in Keras's order."""
    return ", ".join(f"{counts[name]} {name}" for name in ("fit", "evaluate", "predict") if counts[name])


class FitGuard:
    """Layer "script_inputs" (interception.LAYERS): the door of the script's fit, evaluate and predict calls, each
    translated once into what the library's own path takes (slot "inputs" below prepares them, as Runtime's calls).

    Tensors (tf.Tensor, jax.Array) are read as numpy arrays; a fit's pitfalls (checks.py) are warned once each, as
    a plain run would go on where Runtime's calls stop; a call no batch of which divides over the replicas
    (decisions.choose_batch_split) runs on one device, as the script made it. Datasets, PyDatasets, generators and
    Grain loaders take the same rules batch by batch (_stream): evaluate and predict read them into arrays.
    """

    def __init__(self, runtime, plan=None):
        """plan: the run's assembly.FitPlan; a call it has checked strictly (FitPlan.checks_inputs: a fit the runtime's
        own loop trains, with --checkpoint-dir) passes this door as it came, checked below as Runtime.fit's is."""
        self._runtime, self.plan = runtime, plan
        self.warned: set[str] = set()
        self.placement_told = False
        self._models: list = []  # the model of each call passing the door now, innermost last

    @property
    def runtime(self):
        """The runtime as the call being made sees it: under the script's own distribution (on TensorFlow, the
        strategy its model was made under), that distribution's replicas (Runtime.as_called), by which every batch is
        checked, cut and said."""
        as_called = getattr(self._runtime, "as_called", None)  # None: a stand-in runtime (tests of run's layers)
        return as_called(*self._models[-1:]) if as_called is not None else self._runtime

    def __call__(self, call, proceed):
        self._models.append(call.model)
        try:
            return self._door(call, proceed)
        finally:
            self._models.pop()

    def _door(self, call, proceed):
        if self.plan is not None and self.plan.checks_inputs(call.name):
            return proceed(call)
        call, arguments = self._tensors_as_arrays(call)
        if streams.is_stream(arguments.get("x")):
            return self._stream(call, arguments, proceed)
        split, why = decisions.choose_batch_split(call.name, self._training_samples(arguments),
                                                  arguments.get("batch_size"), self.runtime.num_replicas,
                                                  self.runtime.backend_module.SPLITS_UNEVEN_BATCHES)
        op_by_op = self._op_by_op_in_processes(call.model)
        if op_by_op:  # before the inputs are split between the processes: each runs the whole call
            split, why = "one device", op_by_op
        if split == "one device":
            return self._on_one_device(call, arguments, why, proceed)
        if call.name == "fit":
            self._check(arguments, inputs.classes_of(call.model))
            self._tell_placement(call.model, arguments.get("batch_size"))
        else:
            self._check_batch(arguments.get("batch_size"))
        return proceed(call)  # its inputs prepared below (slot "inputs"), as Runtime's calls' are

    def _on_one_device(self, call, arguments, why: str, proceed):
        """The call as the script made it, undistributed on one device (in a job of several processes, each
        process the same call with the same, whole inputs): no batch of it divides over the replicas."""
        if call.name == "fit" and kind_of(arguments.get("x")) == ARRAYS:
            self._check(arguments, inputs.classes_of(call.model), num_replicas=1)
        head, _, advice = why.partition(". ")
        self._tell([(f"one device: {head}", f"{head}: such calls run undistributed, on one device, as the script "
                                            f"makes them (the plain run's math){'. ' + advice if advice else ''}")])
        call.undistributed.append(why)
        with self.runtime.backend_module.on_one_device(call.model):
            return proceed(call)

    @staticmethod
    def _tensors_as_arrays(call):
        """(call, its arguments by name), tensors (tf.Tensor, jax.Array) read into numpy arrays, so they take the
        arrays' rules (and predict's outputs are joined from every process as numpy's are)."""
        arguments = call.arguments()
        names = [name for name in ("x", "y", "sample_weight", "validation_data") if kinds.has_tensors(arguments.get(name))]
        if not names:
            return call, arguments
        arguments.update({name: kinds.tensors_as_numpy(arguments[name]) for name in names})
        return call.replace(args=(), kwargs=arguments), dict(arguments)

    def _stream(self, call, arguments, proceed):
        """A dataset, PyDataset, generator or Grain loader by the arrays' rules (inputs/streams.py): evaluate and
        predict read it into arrays; a fit runs on one device where its batch does not divide, else goes on to have
        every batch made to divide over the replicas and this process's rows of it (slot "inputs")."""
        from acceltrain import assembly

        runtime = self.runtime
        if not assembly.splits(runtime):
            return proceed(call)  # nothing to split, or TensorFlow splits an uneven batch itself
        if call.name != "fit":
            notes = []
            x, y, weights = streams.stream_to_arrays(arguments.pop("x"), arguments.pop("steps", None), notes=notes,
                                                     split=runtime.split)
            self._tell(notes)
            read = {"x": x} if call.name == "predict" else {"x": x, "y": y, "sample_weight": weights}
            return self(call.replace(args=(), kwargs={**arguments, **read}), proceed)
        if runtime.num_processes > 1:
            batch = streams.stream_batch_size(arguments["x"], runtime.process_index, runtime.num_processes)
        else:  # a generator's first batch read ahead, so a batch too small to divide runs on one device, not never
            x, batch = streams.peeked(arguments["x"])
            if x is not arguments["x"]:
                arguments["x"] = x
                call = call.replace(args=(), kwargs=arguments)
        split, why = ("split", "") if batch is None else decisions.choose_batch_split(
            "fit", batch, batch, runtime.num_replicas, runtime.backend_module.SPLITS_UNEVEN_BATCHES)
        op_by_op = self._op_by_op_in_processes(call.model)
        if op_by_op or split == "one device":
            return self._on_one_device(call, arguments, op_by_op or why, proceed)
        return proceed(call)

    def _op_by_op_in_processes(self, model) -> str | None:
        """Why Keras's op-by-op step of `model` must run on one device in this job of several processes, if it must
        (backends/jax/op_by_op.py::op_by_op_in_processes; one process: the placement layer runs it so)."""
        if self.runtime.num_processes <= 1:
            return None
        return self.runtime.backend_module.op_by_op_in_processes(model)

    @staticmethod
    def _training_samples(arguments) -> int:
        split = arguments.get("validation_split") or 0.0
        return int(arrays.num_samples(arguments.get("x")) * (1 - split))

    # --- Checks ---------------------------------------------------------------------------------

    def _check(self, arguments, classes, num_replicas: int | None = None) -> None:
        """The fit-time checks (checks.py) of a fit over `num_replicas` (default: the runtime's)."""
        x, y = arguments.get("x"), arguments.get("y")
        num_samples = self._training_samples(arguments)
        dtypes = {}  # the arrays: the float64 check times their conversion, until it has spoken once
        if "float64_inputs" not in self.warned:
            leaves = arrays.leaves(x)
            dtypes = {"x" if len(leaves) == 1 else f"x[{i}]": leaf for i, leaf in enumerate(leaves)}
            if isinstance(y, np.ndarray):
                dtypes["y"] = y
        findings = checks.check_fit(
            num_samples=num_samples, batch_size=arguments.get("batch_size"),
            steps_per_epoch=arguments.get("steps_per_epoch"), num_replicas=num_replicas or self.runtime.num_replicas,
            platform=self.runtime.platform, splits_unevenly=self.runtime.backend_module.SPLITS_UNEVEN_BATCHES,
            input_dtypes=dtypes, y=y, loss_name=classes.loss_name, output_units=classes.output_units,
        )
        self._report(findings)

    def _check_batch(self, batch_size) -> None:
        self._report(checks.uneven_batch(batch_size, self.runtime.num_replicas,
                                         self.runtime.backend_module.SPLITS_UNEVEN_BATCHES))

    def _report(self, findings) -> None:
        for finding in findings:
            if finding.error:
                raise UsageError(finding.message)
            if finding.key not in self.warned:
                self.warned.add(finding.key)
                log.warn(finding.message)

    def _tell(self, notes) -> None:
        for key, message in notes:
            if key not in self.warned:
                self.warned.add(key)
                log.info(message)

    def _tell_placement(self, model, batch_size) -> None:
        """Once: the split of the batch and where the model's variables are, so the user sees it worked."""
        if self.placement_told:
            return
        self.placement_told = True
        from acceltrain import assembly

        where = ""
        if model.variables:
            spanned = self.runtime.backend_module.devices_spanned(model.variables[0])
            where = f"; the model's variables span {spanned} device{'s' * (spanned > 1)}"
        runtime = self.runtime
        own = getattr(runtime, "words", "")  # under the script's own distribution (Runtime.as_called)
        policy = getattr(getattr(model, "dtype_policy", None), "name", runtime.precision)
        if policy != runtime.precision:  # the script set its own (connect's line said acceltrain's, before it ran)
            where += f"; it computes in its own dtype policy {policy}, not the {runtime.precision} said at the start"
        log.info(f"fit: {inputs.global_batch(batch_size, runtime.num_replicas, assembly.accumulated(model), own)}{where}")
