"""A domain id per image, for the datasets whose images come from domains (`dil`, the
domain-incremental scenario): read from each image's id (its path in the dataset, which a store
keeps), so a store needs nothing new to be read by domain.

Each rule lists the dataset's domains in its standard task order (the order RanPAC, S-Prompts and
FeCAM learn them), training domains first; a domain id is a position in that list.

- `core50`: the session of `sN/oM/...` (Lomonaco & Maltoni, CoRL 2017): train sessions 1, 2, 4, 5,
  6, 8, 9, 11 in that order, test sessions 3, 7, 10 (never trained: the fixed test set);
- `domainnet`: the first folder of `<domain>/<class>/...` (Peng et al., ICCV 2019): clipart,
  infograph, painting, quickdraw, real, sketch;
- `cddb_hard`: the first folder of `<task>/{train,val}/...` (Li et al., WACV 2023, CDDB's hard
  track): gaugan, biggan, wild, whichfaceisreal, san;
- `cifar100_superclasses`: CIFAR-100 read as its 20 superclasses, the domain of an image the
  position of its fine class within its superclass (alphabetical), so task k brings the k-th fine
  class of every superclass (5 tasks).

Import-light: stdlib and the foundation's errors only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tosca_foundation.errors import UserValueError

CIFAR100_SUPERCLASSES: dict[str, tuple[str, ...]] = {  # the official coarse labels, fine names sorted
    "aquatic_mammals": ("beaver", "dolphin", "otter", "seal", "whale"),
    "fish": ("aquarium_fish", "flatfish", "ray", "shark", "trout"),
    "flowers": ("orchid", "poppy", "rose", "sunflower", "tulip"),
    "food_containers": ("bottle", "bowl", "can", "cup", "plate"),
    "fruit_and_vegetables": ("apple", "mushroom", "orange", "pear", "sweet_pepper"),
    "household_electrical_devices": ("clock", "keyboard", "lamp", "telephone", "television"),
    "household_furniture": ("bed", "chair", "couch", "table", "wardrobe"),
    "insects": ("bee", "beetle", "butterfly", "caterpillar", "cockroach"),
    "large_carnivores": ("bear", "leopard", "lion", "tiger", "wolf"),
    "large_man-made_outdoor_things": ("bridge", "castle", "house", "road", "skyscraper"),
    "large_natural_outdoor_scenes": ("cloud", "forest", "mountain", "plain", "sea"),
    "large_omnivores_and_herbivores": ("camel", "cattle", "chimpanzee", "elephant", "kangaroo"),
    "medium_mammals": ("fox", "porcupine", "possum", "raccoon", "skunk"),
    "non-insect_invertebrates": ("crab", "lobster", "snail", "spider", "worm"),
    "people": ("baby", "boy", "girl", "man", "woman"),
    "reptiles": ("crocodile", "dinosaur", "lizard", "snake", "turtle"),
    "small_mammals": ("hamster", "mouse", "rabbit", "shrew", "squirrel"),
    "trees": ("maple_tree", "oak_tree", "palm_tree", "pine_tree", "willow_tree"),
    "vehicles_1": ("bicycle", "bus", "motorcycle", "pickup_truck", "train"),
    "vehicles_2": ("lawn_mower", "rocket", "streetcar", "tank", "tractor"),
}
SUPERCLASS_OF = {fine: coarse for coarse, fines in CIFAR100_SUPERCLASSES.items() for fine in fines}
POSITION_IN_SUPERCLASS = {fine: k for fines in CIFAR100_SUPERCLASSES.values() for k, fine in enumerate(fines)}

CORE50_TRAIN_SESSIONS = (1, 2, 4, 5, 6, 8, 9, 11)
CORE50_TEST_SESSIONS = (3, 7, 10)


def _parts(image_id: str) -> list[str]:
    return [p for p in image_id.replace("\\", "/").split("/") if p]


def _first_folder(image_id: str) -> str:
    return _parts(image_id)[0]


def _core50_session(image_id: str) -> str:
    return next((p for p in _parts(image_id) if p[:1] == "s" and p[1:].isdigit()), "")


def _fine_position(image_id: str) -> str:
    """The fine class folder (`train/<fine>/NNNN.jpg`) -> its position in its superclass, as a name."""
    fine = _parts(image_id)[-2] if len(_parts(image_id)) >= 2 else ""
    return f"fine {POSITION_IN_SUPERCLASS[fine] + 1}" if fine in POSITION_IN_SUPERCLASS else ""


@dataclass(frozen=True)
class DomainRule:
    """A dataset's domains in task order, and how an image id names its domain."""

    dataset: str
    domains: tuple[str, ...]
    domain_of: Callable[[str], str]


DOMAIN_RULES: dict[str, DomainRule] = {
    "core50": DomainRule(
        "core50", tuple(f"s{s}" for s in (*CORE50_TRAIN_SESSIONS, *CORE50_TEST_SESSIONS)), _core50_session
    ),
    "domainnet": DomainRule(
        "domainnet", ("clipart", "infograph", "painting", "quickdraw", "real", "sketch"), _first_folder
    ),
    "cddb_hard": DomainRule(
        "cddb_hard", ("gaugan", "biggan", "wild", "whichfaceisreal", "san"), _first_folder
    ),
    "cifar100_superclasses": DomainRule(
        "cifar100_superclasses", tuple(f"fine {k}" for k in range(1, 6)), _fine_position
    ),
}


def has_domains(dataset: str) -> bool:
    return dataset in DOMAIN_RULES


def domain_ids(dataset: str, image_ids: Sequence[str]) -> list[int]:
    """Each image's domain (a position in the dataset's domain order); one line for an image whose
    id names no domain of the dataset."""
    rule = DOMAIN_RULES.get(dataset)
    if rule is None:
        raise UserValueError(
            f"dataset {dataset!r} has no domains (datasets with domains: {', '.join(DOMAIN_RULES)})"
        )
    position = {name: i for i, name in enumerate(rule.domains)}
    found = []
    for image_id in image_ids:
        name = rule.domain_of(str(image_id))
        if name not in position:
            raise UserValueError(
                f"image {image_id!r} of {dataset} is in no domain ({dataset}'s domains: {', '.join(rule.domains)})"
            )
        found.append(position[name])
    return found
