"""`acceltrain plan --target TARGET`: will the job fit what you are about to rent, and how fast can it go."""

import json

from acceltrain import log
from acceltrain.errors import UsageError, positive_int


def run(args) -> int:
    from acceltrain import sharding
    from acceltrain.planning import DISTRIBUTIONS, plan

    # The flags are checked here so that their errors name the flag; plan() names its Python arguments.
    if args.target is None:  # not argparse's required=: its bare "required" error lists no valid name
        from acceltrain.planning import targets

        raise UsageError(f"Received no --target. Valid: {', '.join(targets.EXAMPLES)} (TPU slices of other sizes too). "
                         "Pass what you are about to rent, e.g. --target tpu-v5e-8, or --target here for this machine.")
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError(f"Received --batch-size {args.batch_size}. Expected a positive whole number (the global "
                         "batch), e.g. --batch-size 1024.")
    for flag, value in (("--sequence-length", args.sequence_length), ("--lora-rank", args.lora_rank)):
        if value is not None:
            positive_int(value, flag)
    if args.distribution not in DISTRIBUTIONS:
        raise UsageError(f"Received --distribution {args.distribution!r}. Valid: {', '.join(DISTRIBUTIONS)}.")
    memory = sharding.parse_bytes(args.device_memory, "--device-memory") if args.device_memory else None
    result = plan(args.target, recipe=args.recipe, model=args.model, batch_size=args.batch_size,
                  distribution=args.distribution, device_memory=memory, sequence_length=args.sequence_length,
                  lora_rank=args.lora_rank, compare=args.compare, precision=args.precision)
    print(json.dumps(result.as_dict(), indent=2) if args.json else result.table())
    if args.json:
        for note in result.notes:
            log.info(f"note: {note}")
    return 0
