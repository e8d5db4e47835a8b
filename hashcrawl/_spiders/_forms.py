"""Scrapy's ``FormRequest``: a request whose body (or query) is a form's fields, made by
hand or from a form on a page, hidden inputs (a CSRF token) included."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from hashcrawl._exceptions import ConfigError
from hashcrawl._web._models import Request

if TYPE_CHECKING:
    from parsel import Selector

    from hashcrawl._web._models import Response

FormData = Mapping[str, str | Iterable[str]] | Iterable[tuple[str, str]]
FORM_TYPE = "application/x-www-form-urlencoded"
_NOT_SENT = {"submit", "image", "reset", "button", "file"}


def _pairs(formdata: FormData | None) -> list[tuple[str, str]]:
    """Form fields as (name, value) pairs; a mapping's list value gives a pair each."""
    if formdata is None:
        return []
    if isinstance(formdata, Mapping):
        pairs = []
        for name, value in formdata.items():
            values = [value] if isinstance(value, str) else list(value)
            pairs += [(str(name), str(v)) for v in values]
        return pairs
    return [(str(name), str(value)) for name, value in formdata]


class FormRequest:
    """``FormRequest(url, formdata={...})``: a :class:`~hashcrawl.Request` sending the
    fields urlencoded, in the body of a POST (the default) or the query of a GET.

    It makes a plain ``Request``: what travels through Redis is the method, URL and body.
    """

    def __new__(  # type: ignore[misc]
        cls, url: str, *, formdata: FormData | None = None, method: str = "POST", **request: Any
    ) -> Request:
        return _form_request(url, method.upper(), _pairs(formdata), request)

    @staticmethod
    def from_response(
        response: Response,
        *,
        formname: str | None = None,
        formid: str | None = None,
        formnumber: int = 0,
        formcss: str | None = None,
        formxpath: str | None = None,
        formdata: FormData | None = None,
        clickdata: Mapping[str, str] | None = None,
        dont_click: bool = False,
        **request: Any,
    ) -> Request:
        """A request submitting a form of ``response``, as Scrapy's ``from_response``:
        the form's own fields (hidden ones included) with ``formdata`` overriding them,
        to the form's action by its method.

        The form is the one named ``formname``, else with id ``formid``, else the first
        ``formcss`` or ``formxpath`` selects, else the ``formnumber``-th (from 0). Unless
        ``dont_click``, the first submit button's name and value are sent, as a
        browser's click would (``clickdata`` picks another by its attributes).

        Raises:
            ValueError: no such form on the page.
        """
        form = _form(response, formname, formid, formnumber, formcss, formxpath)
        given = _pairs(formdata)
        overridden = {name for name, _ in given}
        fields = [(n, v) for n, v in _fields(form) if n not in overridden]
        click = None if dont_click else _clicked(form, clickdata)
        if click is not None and click[0] not in overridden:
            fields.append(click)
        action = form.root.get("action")
        url = response.urljoin(action.strip()) if action and action.strip() else response.url
        if url is None:
            raise ValueError(
                f"FormRequest.from_response: the form's action {action!r:.100} leads nowhere"
            )
        method = request.pop("method", None) or str(form.root.get("method") or "GET")
        return _form_request(url, method.upper(), fields + given, request)


def _form_request(
    url: str, method: str, fields: list[tuple[str, str]], request: dict[str, Any]
) -> Request:
    encoded = urlencode(fields)
    if method == "GET":
        parts = urlsplit(url)
        query = "&".join(q for q in (parts.query, encoded) if q) if encoded else parts.query
        return Request(urlunsplit(parts._replace(query=query)), method="GET", **request)
    headers = dict(request.pop("headers", None) or {})
    if not any(name.lower() == "content-type" for name in headers):
        headers["Content-Type"] = FORM_TYPE
    return Request(url, method=method, body=encoded, headers=headers, **request)


def _form(
    response: Response,
    formname: str | None,
    formid: str | None,
    formnumber: int,
    formcss: str | None,
    formxpath: str | None,
) -> Selector:
    forms = response.xpath("//form")
    if not forms:
        raise ValueError(f"FormRequest.from_response: no <form> on {response.url}")
    chosen: Sequence[Selector] | None = None
    if formname is not None:
        chosen = response.xpath("//form[@name=$name]", name=formname)
    elif formid is not None:
        chosen = response.xpath("//form[@id=$id]", id=formid)
    elif formcss is not None or formxpath is not None:
        picked = response.css(formcss) if formcss is not None else response.xpath(str(formxpath))
        chosen = [
            form for element in picked for form in element.xpath("ancestor-or-self::form[1]")
        ][:1]
    if chosen is not None:
        if not chosen:
            wanted = formname or formid or formcss or formxpath
            raise ValueError(f"FormRequest.from_response: no form {wanted!r} on {response.url}")
        return chosen[0]
    if not 0 <= formnumber < len(forms):
        raise ValueError(
            f"FormRequest.from_response: formnumber {formnumber} on a page of {len(forms)} forms"
        )
    return forms[formnumber]


def _fields(form: Selector) -> list[tuple[str, str]]:
    """What a browser sends of a form's inputs, selects and textareas, in their order."""
    fields = []
    for element in form.xpath(".//input|.//select|.//textarea"):
        root = element.root
        name = root.get("name")
        if not name:
            continue
        if root.tag == "textarea":
            fields.append((name, "".join(element.xpath("text()").getall())))
        elif root.tag == "select":
            fields += [(name, value) for value in _selected(element)]
        else:
            kind = str(root.get("type") or "text").lower()
            if kind in _NOT_SENT:
                continue
            if kind in ("checkbox", "radio"):
                if root.get("checked") is not None:
                    fields.append((name, root.get("value") or "on"))
                continue
            fields.append((name, root.get("value") or ""))
    return fields


def _selected(select: Selector) -> list[str]:
    options = select.xpath(".//option")
    chosen = [o for o in options if o.root.get("selected") is not None]
    if not chosen and select.root.get("multiple") is None:
        chosen = options[:1]
    return [str(o.root.get("value", "".join(o.xpath("text()").getall()).strip())) for o in chosen]


def _clicked(form: Selector, clickdata: Mapping[str, str] | None) -> tuple[str, str] | None:
    buttons = form.xpath(
        './/input[@type="submit" or @type="image"]|.//button[not(@type) or @type="submit"]'
    )
    for button in buttons:
        root = button.root
        if clickdata and not all(root.get(k) == v for k, v in clickdata.items()):
            continue
        name = root.get("name")
        return (name, root.get("value") or "") if name else None
    if clickdata:
        raise ConfigError(
            f"FormRequest.from_response: no submit button matches {dict(clickdata)!r}"
        )
    return None
