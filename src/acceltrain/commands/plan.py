"""`acceltrain plan --target TARGET`: will the job fit what you are about to rent, and how fast can it go."""

import json

from acceltrain import log


def run(args) -> int:
    from acceltrain.planning import plan

    result = plan(args.target, recipe=args.recipe, model=args.model, batch_size=args.batch_size,
                  distribution=args.distribution, device_memory=args.device_memory)
    print(json.dumps(result.as_dict(), indent=2) if args.json else result.table())
    if args.json:
        for note in result.notes:
            log.info(f"note: {note}")
    return 0
