"""`/` and `/api/v1/` are the front door: an index of links (JSON for clients, HTML for
browsers) instead of a 404; the admin's "View site" leads there; the admin has a favicon."""

import json
import re

import pytest
from django.contrib.auth.models import User
from django.contrib.staticfiles import finders
from django.test import Client

PATHS = ["/", "/api/v1/"]


@pytest.fixture
def client():
    return Client()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("accept", [None, "application/json", "*/*"])
def test_it_answers_api_clients_with_a_json_index(client, path, accept):
    headers = {"HTTP_ACCEPT": accept} if accept else {}
    response = client.get(path, **headers)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert "Accept" in response["Vary"]
    document = json.loads(response.content)
    links = document["links"]
    assert links == {
        "api": "http://testserver/api/v1/",
        "docs": "http://testserver/api/docs/",
        "schema": "http://testserver/api/schema/",
        "admin": "http://testserver/admin/",
        "health": "http://testserver/healthz",
        "ready": "http://testserver/readyz",
    }
    assert {"bundles", "catalog", "sessions", "audit"} <= document["resources"].keys()
    assert document["resources"]["bundles"] == "http://testserver/api/v1/bundles/"


@pytest.mark.django_db
def test_every_link_of_the_index_leads_somewhere(client):
    document = json.loads(client.get("/").content)
    for name, url in [*document["links"].items(), *document["resources"].items()]:
        path = url.removeprefix("http://testserver")
        status = client.get(path, follow=False).status_code
        # The API's collections want a key (401); the admin redirects to its login (302).
        assert status in (200, 302, 401, 405), (name, url, status)


@pytest.mark.parametrize("path", PATHS)
def test_it_answers_a_browser_with_an_html_page_of_links(client, path):
    browser = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
    response = client.get(path, HTTP_ACCEPT=browser)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    for href in ["/api/docs/", "/api/v1/", "/admin/", "/healthz", "/favicon.svg"]:
        assert re.search(rf'href="[^"]*{re.escape(href)}"', html), href


@pytest.mark.parametrize("path", PATHS)
def test_it_refuses_writes_to_the_index_in_the_error_shape(client, path):
    response = client.post(path, data="{}", content_type="application/json")
    assert response.status_code == 405
    assert json.loads(response.content)["error"]["code"] == "method_not_allowed"
    assert response["Allow"] == "GET, HEAD"


def test_unknown_addresses_are_still_the_json_404(client):
    response = client.get("/api/v1/nothing-here/")
    assert response.status_code == 404
    assert json.loads(response.content)["error"]["code"] == "not_found"


def test_the_favicon_exists_and_is_offered_at_the_usual_address(client):
    assert finders.find("adminui/favicon.svg"), "adminui/static/adminui/favicon.svg is missing"
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("/adminui/favicon.svg")


@pytest.mark.django_db
def test_the_admin_links_its_favicon_and_its_view_site_link_leads_to_the_index(client):
    user = User.objects.create_superuser("root", "root@example.com", "a long password 123")
    client.force_login(user)
    html = client.get("/admin/").content.decode()
    assert re.search(r'<link rel="icon" href="[^"]*/adminui/favicon\.svg"', html)
    (view_site,) = re.findall(r'<a href="([^"]*)">View site</a>', html)
    response = client.get(view_site, HTTP_ACCEPT="text/html")
    assert response.status_code == 200 and b"Prompt registry" in response.content
