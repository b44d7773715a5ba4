"""Example plugin `geo`, written in Python: great-circle distances.

Built with componentize-py (see build.sh); the host sees `geo.distance` and
`geo.nearest` with the WIT types of wit/world.wit as their signatures.
"""

import math
import inspect
import traceback
from functools import wraps
from typing import List

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.geo import DistanceResult, NearestResult, Place, Point
from wit_world.exports.annotations import Annotated, Hints
from wit_world.exports.metadata import Capability

# Mean Earth radius (IUGG), in kilometres.
EARTH_RADIUS_KM = 6371.0088


def capabilities(cls):
    """Makes an exception escaping a method of `cls` its capability's failure: the
    agent reads `capability failed: KeyError: 'x'`, the operator log gets the
    traceback. `raise Err("...")` is the failure message as it is."""
    for name, method in list(vars(cls).items()):
        if inspect.isfunction(method) and not name.startswith("_"):
            setattr(cls, name, _explained(method))
    return cls


def _explained(method):
    @wraps(method)
    def call(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except Err:
            raise
        except Exception as error:
            traceback.print_exc()
            message = _text(error)
            raise Err(f"{type(error).__name__}: {message}" if message else type(error).__name__) from None

    return call


def _text(error):
    """`str(error)`, or nothing when even that fails."""
    try:
        return str(error)
    except Exception:
        return ""


def _check(name: str, point: Point) -> None:
    if not (-90.0 <= point.lat <= 90.0):
        raise Err(f"{name}.lat must be between -90 and 90, got {point.lat}")
    if not (-180.0 <= point.lon <= 180.0):
        raise Err(f"{name}.lon must be between -180 and 180, got {point.lon}")


def _haversine_km(a: Point, b: Point) -> float:
    lat1, lon1, lat2, lon2 = map(math.radians, (a.lat, a.lon, b.lat, b.lon))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))


@capabilities
class Geo(exports.Geo):
    def distance(self, a: Point, b: Point) -> DistanceResult:
        _check("a", a)
        _check("b", b)
        return DistanceResult(km=_haversine_km(a, b))

    def nearest(self, origin: Point, places: List[Place]) -> NearestResult:
        _check("origin", origin)
        if not places:
            raise Err("places must not be empty")
        best = None
        for place in places:
            _check(place.name, Point(lat=place.lat, lon=place.lon))
            km = _haversine_km(origin, Point(lat=place.lat, lon=place.lon))
            if best is None or km < best.km:
                best = NearestResult(name=place.name, km=km)
        return best


class Metadata(exports.Metadata):
    def describe(self) -> List[Capability]:
        return [
            Capability(
                export_name="geo.distance",
                name=None,
                id=None,
                summary="Great-circle distance in kilometres between two points given as latitude/longitude degrees.",
                description="Haversine formula on a spherical Earth (mean radius 6371.0088 km); accurate to about 0.5 %.",
                search_terms=["distance", "km", "kilometres", "haversine", "coordinates", "latitude", "longitude"],
            ),
            Capability(
                export_name="geo.nearest",
                name=None,
                id=None,
                summary="The place nearest to an origin point, with its distance in kilometres.",
                description=None,
                search_terms=["closest", "nearest", "distance", "places", "coordinates"],
            ),
        ]


class Annotations(exports.Annotations):
    def annotate(self) -> List[Annotated]:
        # Pure functions of their arguments: a policy that asks before writes
        # lets them run.
        pure = Hints(read_only=True, destructive=None, idempotent=True, open_world=False)
        return [
            Annotated(export_name="geo.distance", hints=pure),
            Annotated(export_name="geo.nearest", hints=pure),
        ]

