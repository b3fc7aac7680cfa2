"""`mpdp provision`: a federation description in, one folder per site out; plus the CSR flow.

    mpdp provision federation.yaml --out sites          (short for `mpdp provision sites ...`)
    mpdp provision csr --role party --site hospital-a --out my-site      (at the institution)
    mpdp provision sign --ca sites-ca --csr site.csr --hosts h.example.org --out signed   (at the operator)
    mpdp provision show site.crt                        (role, site, expiry, fingerprint)
    mpdp provision check my-site                        (key matches certificate, signed by ca.crt, not expired)
    mpdp provision demo-data --parties party-1,party-2,party-3 --out data
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from mpdp_services.cli.errors import CliError

from mpdp_services.common import pki


class _DefaultGroup(click.Group):
    """A group whose first argument, when it is not a subcommand, goes to the default subcommand."""

    default = "sites"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = [self.default, *args]
        return super().parse_args(ctx, args)


def _fail(e: Exception) -> click.ClickException:
    return click.ClickException(str(e))


@click.group(cls=_DefaultGroup)
def provision() -> None:
    """Provision a federation: a CA, a certificate per site, each site's config and README.

    `mpdp provision FEDERATION.yaml --out DIR` is short for `mpdp provision sites FEDERATION.yaml --out DIR`.
    See docs/deploy.md for the description format, distribution, expiry and rotation.
    """


@provision.command("sites")
@click.argument("federation_yaml", type=click.Path(dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False), help="output folder: one sub-folder per site, to hand out")
@click.option("--ca", "ca_dir", type=click.Path(file_okay=False), default=None, help="CA folder (ca.key, ca.crt); reused if it exists, else created  [default: OUT-ca beside OUT]")
@click.option("--force", is_flag=True, help="replace existing site folders: new keys and certificates (rotation)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def sites(federation_yaml: str, out: str, ca_dir: str | None, force: bool, as_json: bool) -> None:
    """Write a folder per site (certificate, key, CA certificate, config, README) from FEDERATION_YAML."""
    from mpdp_services.provisioning.provision import ProvisionError, load_spec
    from mpdp_services.provisioning.provision import provision as run

    try:
        result = run(load_spec(federation_yaml), out, ca_dir, force)
    except ProvisionError as e:
        raise _fail(e)
    d = result.as_dict()
    if as_json:
        click.echo(json.dumps(d))
        return
    click.echo(f"federation {d['federation']!r}: CA {'created' if d['ca_created'] else 'reused'} in {d['ca_folder']} (keep it on this host; never copy ca.key to a site)")
    click.echo(f"CA fingerprint (SHA-256): {d['ca_fingerprint_sha256']}  (tell the sites out of band)")
    for s in d["sites"]:
        key = "" if s["key_in_folder"] else "  (signed from the site's CSR: its key stays at the site)"
        click.echo(f"  {s['role']:<12} {s['name']:<16} {s['folder']}  valid until {s['not_after'][:10]}{key}")
    click.echo(f"hand each folder to its site over a secure channel; {Path(out) / 'federation.json'} lists them")


@provision.command("csr")
@click.option("--role", required=True, type=click.Choice(list(pki.ROLES)), help="the role this site plays")
@click.option("--site", required=True, help="site name, exactly as in the federation description (DNS label)")
@click.option("--federation", default="", help="federation name (optional; checked when signing)")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="folder for site.key (stays here) and site.csr (send it)")
@click.option("--force", is_flag=True, help="replace an existing site.key")
def csr(role: str, site: str, federation: str, out: str, force: bool) -> None:
    """At the institution: make a private key and a certificate signing request (the key never leaves)."""
    from mpdp_services.provisioning.provision import ProvisionError, make_csr_files

    try:
        key_p, csr_p = make_csr_files(role, site, out, federation, force)
    except ProvisionError as e:
        raise _fail(e)
    click.echo(f"private key: {key_p} (mode 0600; keep it here)")
    click.echo(f"request:     {csr_p} (send this file to the federation operator; it holds no secret)")


@provision.command("sign")
@click.option("--ca", "ca_dir", required=True, type=click.Path(file_okay=False), help="the CA folder (ca.key, ca.crt)")
@click.option("--csr", "csr_path", required=True, type=click.Path(dir_okay=False), help="the site's site.csr")
@click.option("--hosts", multiple=True, help="host names or IPs the site is reached at (repeatable or comma-separated)")
@click.option("--role", type=click.Choice(list(pki.ROLES)), default=None, help="refuse unless the CSR asks for this role")
@click.option("--days", type=click.IntRange(1, 3650), default=pki.DEFAULT_DAYS, show_default=True, help="certificate lifetime")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="folder for site.crt and ca.crt (send both back)")
def sign(ca_dir: str, csr_path: str, hosts: tuple[str, ...], role: str | None, days: int, out: str) -> None:
    """At the federation operator: sign a site's CSR; role and site name come from the CSR."""
    from mpdp_services.provisioning.provision import ProvisionError, describe, sign_csr_file

    names = [h.strip() for item in hosts for h in item.split(",") if h.strip()]
    try:
        crt, _ = sign_csr_file(ca_dir, csr_path, names, out, days, role)
        info = describe(crt)
    except ProvisionError as e:
        raise _fail(e)
    click.echo(f"signed {info['role']} {info['site']!r} of {info['federation']!r}, valid until {info['not_after'][:16]} UTC, SAN {', '.join(info['san'])}")
    click.echo(f"send {crt} and {Path(out) / 'ca.crt'} back to the site")


@provision.command("show")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object per file")
def show(files: tuple[str, ...], as_json: bool) -> None:
    """Print what a certificate or CSR says: role, site, federation, SAN, validity, SHA-256 fingerprint."""
    from mpdp_services.provisioning.provision import ProvisionError, describe

    for f in files:
        try:
            info = describe(f)
        except ProvisionError as e:
            raise _fail(e)
        if as_json:
            click.echo(json.dumps(info))
            continue
        click.echo(f"{f}:")
        for k, v in info.items():
            if k != "file":
                click.echo(f"  {k}: {', '.join(v) if isinstance(v, list) else v}")


@provision.command("check")
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (ok or not; the exit code still says which)")
def check(folder: str, as_json: bool) -> None:
    """Check a site folder: files present, key matches certificate, signed by ca.crt, not expired."""
    from mpdp_services.provisioning.provision import verify_site

    problems = verify_site(folder)
    hint = "`mpdp provision sites` writes a site folder again; `mpdp provision show FILE` says what a certificate holds"
    if as_json:  # one object, as when ok, with the error beside "ok"
        doc: dict[str, object] = {"folder": folder, "ok": not problems, "problems": problems}
        if problems:
            doc["error"] = {"code": "invalid", "message": f"{folder}: " + "; ".join(problems), "hint": hint}
        click.echo(json.dumps(doc))
        if problems:
            raise SystemExit(1)
        return
    if problems:
        raise CliError(f"{folder}: " + "; ".join(problems), code="invalid", hint=hint)
    click.echo(f"{folder}: ok")


@provision.command("demo-data")
@click.option("--parties", required=True, help="comma-separated party names")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="folder: OUT/<party>/breast_cancer.csv, OUT/operator/breast_cancer_test.csv, OUT/curator/breast_cancer_aux.csv")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object: each site's file")
def demo_data(parties: str, out: str, as_json: bool) -> None:
    """Split scikit-learn's bundled breast-cancer data into per-party CSVs (demo only; never commit them)."""
    from mpdp_services.provisioning.provision import ProvisionError, write_demo_data

    try:
        paths = write_demo_data(out, [p.strip() for p in parties.split(",") if p.strip()])
    except ProvisionError as e:
        raise _fail(e)
    if as_json:
        click.echo(json.dumps({name: str(p) for name, p in paths.items()}))
        return
    for name, p in paths.items():
        click.echo(f"{name}: {p}")
