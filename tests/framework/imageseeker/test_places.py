"""The bundled gazetteer: reverse geocoding, alias normalisation, place names in text."""

import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.methods.imageseeker.places import fold, load_gazetteer, place_match


@pytest.fixture(scope="module")
def gaz():
    return load_gazetteer()


def test_reverse_geocoding_names_the_city_not_the_district(gaz):
    assert gaz.reverse(40.7128, -74.0060)["address"] == "New York City, New York, United States"
    assert gaz.reverse(41.9, 12.5)["address"] == "Rome, Italy"  # nearest entry is a district of Rome
    assert gaz.reverse(40.678, -73.944)["city"] == "New York City"  # Brooklyn -> the city
    far = gaz.reverse(0.0, -150.0)  # mid-Pacific: country of the nearest city only
    assert far["city"] == "" and far["distance_km"] > 50
    with pytest.raises(InputError, match="coordinates out of range"):
        gaz.reverse(95.0, 0.0)


@pytest.mark.parametrize(
    "address,place,expected",
    [
        ("New York City, New York, United States", "NYC", True),
        ("New York City, New York, United States", "new york", True),
        ("Rome, Italy", "Roma", True),
        ("Florence, Italy", "Firenze", True),
        ("Vienna, Austria", "Wien", True),
        ("Florence, Italy", "Italy", True),
        ("Paris, France", "paris", True),
        ("Rome, Italy", "Florence", False),
        ("Munich, Germany", "Berlin", False),
        ("Prague, Czechia", "Czech Republic", True),
        ("São Paulo, Brazil", "Sao Paulo", True),
    ],
)
def test_place_match_with_aliases(gaz, address, place, expected):
    assert place_match(address, place, gaz) is expected


def test_find_places_in_text(gaz):
    assert gaz.find_places("the hat photos from the day I photographed shoes in New York and Rome") == [
        "New York",
        "Rome",
    ]
    assert gaz.find_places("Find the Dress photos in NYC") == ["NYC"]
    assert gaz.find_places("photos from the beach", min_population=15000) == []
    assert fold("Bogotá, D.C.") == "bogota d c"
