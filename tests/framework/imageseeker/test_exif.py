"""Photo metadata from EXIF/XMP: real files of ../shared/data/exif-photos, sidecars, broken files."""

from pathlib import Path

from agentcir.framework.images import list_images
from agentcir.framework.methods.imageseeker.exif import parse_xmp, read_metadata, scan_folder

FACES_XMP = """<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">
<rdf:Description rdf:about="" xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:xmp="http://ns.adobe.com/xap/1.0/"
  xmlns:mwg-rs="http://www.metadataworkinggroup.com/schemas/regions/" xmlns:lr="http://ns.adobe.com/lightroom/1.0/"
  xmlns:exif="http://ns.adobe.com/exif/1.0/" xmlns:xmpDM="http://ns.adobe.com/xmp/1.0/DynamicMedia/"
  xmp:CreateDate="2021-07-04T18:30:00+02:00" xmp:Rating="4" exif:GPSLatitude="41,53.4N" exif:GPSLongitude="12,29.4E"
  xmpDM:album="Summer trip">
 <dc:subject><rdf:Bag><rdf:li>beach</rdf:li><rdf:li>Ada</rdf:li></rdf:Bag></dc:subject>
 <lr:hierarchicalSubject><rdf:Bag><rdf:li>People|Ada</rdf:li><rdf:li>Places|Rome</rdf:li></rdf:Bag></lr:hierarchicalSubject>
 <mwg-rs:Regions rdf:parseType="Resource"><mwg-rs:RegionList><rdf:Bag><rdf:li>
  <rdf:Description mwg-rs:Name="Grace" mwg-rs:Type="Face"/></rdf:li><rdf:li>
  <rdf:Description mwg-rs:Name="a pet" mwg-rs:Type="Pet"/></rdf:li></rdf:Bag></mwg-rs:RegionList></mwg-rs:Regions>
</rdf:Description></rdf:RDF></x:xmpmeta>"""


def _jpeg(path: Path) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (10, 20, 30)).save(path)
    return path


def test_xmp_people_tags_albums_rating():
    x = parse_xmp(FACES_XMP)
    assert x["people"] == ["Ada", "Grace"]  # hierarchical People| tag + MWG face region; the pet is not a person
    assert x["tags"] == ["beach", "Rome"] and x["albums"] == ["Summer trip"] and x["Rating"] == "4"


def test_utf16_sidecar_gives_date_gps_place_album_people(tmp_path):
    photo = _jpeg(tmp_path / "trips" / "rome" / "IMG_1.jpg")
    (tmp_path / "trips" / "rome" / "IMG_1.jpg.xmp").write_bytes(FACES_XMP.encode("utf-16"))
    meta, problems = read_metadata(photo, root=tmp_path)
    assert problems == []
    assert meta["taken_time"] == "2021-07-04 18:30:00" and meta["time_source"] == "xmp:CreateDate"
    assert meta["address"] == "Rome, Italy" and meta["place_source"] == "gazetteer"
    assert abs(meta["latitude"] - 41.89) < 1e-6 and meta["album"] == "trips/rome"
    assert meta["albums"] == ["trips/rome", "Summer trip"] and meta["people"] == ["Ada", "Grace"]
    assert meta["tags"] == ["beach", "Rome"] and meta["rating"] == 4


def test_broken_files_are_partial_records_never_crashes(tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe1\x00\x10Exif\x00\x00MM\x00\x2a\x00\x00\x00\x08 truncated")
    bad_xmp = _jpeg(tmp_path / "bad.jpg")
    (tmp_path / "bad.xmp").write_text(
        '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmp:CreateDate="2020-01-02T03:04:05"'
        ' mwg-rs:Name="Bo"><unclosed></x:xmpmeta>'
    )
    zero = _jpeg(tmp_path / "zero.jpg")
    records, report = scan_folder([broken, bad_xmp, zero, tmp_path / "missing.jpg"], tmp_path)
    assert report.files == 4 and len(records) == 4
    assert records[1]["taken_time"] == "2020-01-02 03:04:05" and records[1]["people"] == ["Bo"]  # tolerant fallback
    assert any("not well-formed" in p for p in records[1]["metadata_problems"])
    assert "file unreadable" in " ".join(records[3]["metadata_problems"]) or "EXIF unreadable" in " ".join(
        records[3]["metadata_problems"]
    )
    assert records[2] == {}  # a plain image: nothing to read, nothing wrong
    assert len(report.partial) >= 2 and "partial record(s)" in report.line()


def test_real_exif_photos(shared_dir):
    root = shared_dir / "data" / "exif-photos"
    images, others = list_images(root)
    records, report = scan_folder(images, root, progress=False)  # 120+ files, many formats, broken ones: no crash
    by = {str(p.relative_to(root)): r for p, r in zip(images, records)}
    assert report.files == len(images) > 100 and report.with_gps >= 15 and report.with_people == 2
    heic = by["immich/formats/heic/IMG_2682.heic"]
    assert heic["taken_time"] == "2019-03-21 11:04:22" and heic["capturedevice"] == "Apple iPhone 7"
    assert heic["address"] == "Omaha, Nebraska, United States"
    assert by["immich/metadata/faces/portrait.jpg"]["people"] == ["Marie Curie", "Pierre Curie"]
    assert by["immich/metadata/dates/gps-datetime.jpg"]["time_source"] == "xmp:exif:GPSTimeStamp"
    assert by["exif-samples/jpg/tests/87_OSError.jpg"]["address"] == "Florence, Italy"
    assert by["immich/metadata/rating/mongolels.jpg"]["rating"] == 3
    assert by["immich/albums/nature/prairie_falcon.jpg"]["album"] == "immich/albums/nature"
    assert "raptors" in by["immich/albums/nature/prairie_falcon.jpg"]["tags"]
    assert any("corrupted" in p for _, probs in report.partial for p in probs)  # malformed EXIF is reported, not raised
    for name in ("image00971.jpg", "image01551.jpg"):  # the "invalid" samples: records, no crash
        assert f"exif-samples/jpg/invalid/{name}" in by


def test_real_sidecars_utf16_and_the_problem_file(shared_dir):
    root = shared_dir / "data" / "exif-photos" / "immich"
    meta, problems = read_metadata(root / "metadata" / "xmp" / "dates" / "2020.xmp")  # a UTF-16 sidecar
    assert meta["taken_time"] == "2020-09-27 14:35:33" and problems == []
    meta, problems = read_metadata(root / "problems" / "xmp" / "iso-value-array" / "iso-value-array.xmp")
    assert meta["capturedevice"] == "Canon PowerShot SX120 IS" and meta["city"] == "Lancaster"  # XMP GPS "40,14.07N"
