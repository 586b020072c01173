"""Provider token shapes that the core rules (shared/intake/redact.py) and detect-secrets' plugins
miss: a token found by its form alone, wherever it stands (``unexpected value: sgp_…``).

Each shape is published by gitleaks' default rules (config/gitleaks.toml, the rule id named in
the comment), a trufflehog detector (pkg/detectors/<name>), or the provider's own
documentation; the expressions are tracehound's own. Every rule has triggers (lowercase
substrings of its prefix), so a text without them skips it, and starts at a literal with the
word-boundary check placed after the first character (see shared/intake/redact.py on speed).
Shapes without a distinctive prefix (a bare 32-character hex key, a 52-character lowercase
Azure DevOps PAT) cannot be told from an identifier and are left to the rules that read the
name beside a value (shared/intake/secret_contexts.py).
"""

from __future__ import annotations

import re

from shared.intake.secret_rule import Rule, marker


def _shape(name: str, pattern: str, *triggers: str) -> Rule:
    return Rule(name, re.compile(pattern), marker(name), triggers)


def _token(name: str, prefix: str, body: str, *triggers: str) -> Rule:
    """``prefix`` (a literal) not preceded by a word character or ``-``, then ``body``;
    triggered by the lowercase prefix unless ``triggers`` are given."""
    first, rest = re.escape(prefix[0]), re.escape(prefix[1:])
    pattern = f"{first}(?<![\\w-]{first}){rest}{body}"
    return _shape(name, pattern, *(triggers or (prefix.lower(),)))


_HEX = "[a-f0-9]"
_UUID = r"[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}"
_END = r"(?![A-Za-z0-9])"

PROVIDER_RULES: tuple[Rule, ...] = (
    _shape("atlassian_token", r"ATATT3[A-Za-z0-9_\-=]{150,}+", "atatt3"),  # atlassian-api-token
    _shape("bitbucket_token", r"A(?<![\w-]A)TBB[A-Za-z0-9]{28,}+", "atbb"),  # trufflehog bitbucket
    _shape(
        "bitbucket_dc_token", r"BBDC-[\w+/@=-]{40,}+", "bbdc-"
    ),  # trufflehog bitbucketdatacenter
    _shape("tailscale_key", r"tskey-[a-z]+-[A-Za-z0-9]+-[A-Za-z0-9]+", "tskey-"),  # tailscale
    _shape("scalingo_token", r"tk-us-[\w-]{40,}+", "tk-us-"),  # scalingo-api-token
    # facebook-page-access-token (EAAM/EAAC…), square-access-token (EAAA…)
    _shape("facebook_token", r"E(?<![\w-]E)AA[A-Za-z0-9_-]{30,}+", "eaa"),
    # facebook-access-token: <app id>|<app secret>
    _shape(
        "facebook_app_token", r"\d(?<![\w-]\d)\d{14,15}(?:\||%7C)[0-9a-zA-Z_-]{27,40}", "|", "%7c"
    ),
    _shape("stripe_webhook_secret", r"whsec_[A-Za-z0-9+/=]{24,}+", "whsec_"),
    _shape(
        "checkout_key",
        r"[sp](?<![\w-][sp])k_(?:sbox_|test_)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        "k_",
    ),
    _shape("flutterwave_key", r"FLW(?:SECK|PUBK)(?:_TEST)?-[0-9a-fA-F]{32}-X", "flw"),
    _shape("duffel_token", r"duffel_(?:test|live)_[\w=-]{40,}+", "duffel_"),
    _shape("shippo_token", r"shippo_(?:live|test)_[0-9a-fA-F]{40}", "shippo_"),
    _shape("razorpay_key", r"rzp_(?:live|test)_[A-Za-z0-9]{14,}+", "rzp_"),
    _shape(
        "plaid_token",
        r"access-(?:sandbox|development|production)-[0-9a-f]{8}-[0-9a-f-]{27}",
        "access-",
    ),
    _shape("rubygems_key", r"rubygems_[0-9a-f]{48}", "rubygems_"),
    _shape("grafana_token", r"gl(?:sa|c)_[A-Za-z0-9+/_=-]{32,}+", "glsa_", "glc_"),
    _shape("grafana_api_key", r"eyJrIjoi[A-Za-z0-9+/=]{40,}+", "eyjrijoi"),
    _shape("dynatrace_token", r"dt0c01\.[A-Z0-9]{24}\.[A-Z0-9]{64}", "dt0c01."),
    _shape("heroku_key_v2", r"HRKU-[A-Za-z0-9_-]{40,}+", "hrku-"),
    _shape("digitalocean_token", r"do[opr]_v1_[0-9a-f]{64}", "_v1_"),
    _shape("firebase_fcm_key", r"AAAA[A-Za-z0-9_-]{7}:[A-Za-z0-9_-]{100,}+", "aaaa"),
    _shape("slack_config_token", r"xoxe(?:\.xox[bp])?-\d-[A-Za-z0-9]{60,}+", "xoxe"),
    # A base64-encoded PEM ("-----BEGIN": kubeconfig's client-key-data, a k8s secret's data).
    _shape("pem_base64", r"LS0tLS1CRUdJTi[A-Za-z0-9+/=]{20,}+", "ls0tls1crudjti"),
    # Webhook URLs are credentials: whoever has one posts to the channel.
    _shape(
        "chat_webhook",
        r"https://(?:discord(?:app)?\.com/api/webhooks/\d+/[\w-]+"
        r"|[\w-]+\.webhook\.office\.com/webhookb2/[^\s\"'<>]+"
        r"|hooks\.zapier\.com/hooks/catch/\d+/\w+/?)",
        "webhook",
        "hooks.zapier",
    ),
    # --- cloud -----------------------------------------------------------------------------------
    # AWS STS session tokens: base64 of a fixed header, so they all start alike (trufflehog aws).
    _token("aws_session_token", "IQoJb3JpZ2luX2Vj", r"[A-Za-z0-9+/=]{100,}+"),
    _token("aws_bedrock_key", "ABSK", r"[A-Za-z0-9+/]{100,}+=*+"),  # aws-amazon-bedrock-api-key-*
    _token("aws_bedrock_key", "bedrock-api-key-", r"[A-Za-z0-9+/]{100,}+=*+"),
    _token("google_oauth_secret", "GOCSPX-", r"[A-Za-z0-9_-]{28}"),  # Google's OAuth client docs
    _token("google_oauth_token", "ya29.", r"[A-Za-z0-9_-]{30,}+"),  # trufflehog googleoauth2
    _token("google_refresh_token", "1//0", r"[A-Za-z0-9_-]{40,}+"),  # Google OAuth refresh tokens
    # azure-ad-client-secret: 3 characters, a digit, Q~, 31 to 34 more
    _shape(
        "azure_ad_secret",
        r"(?<![\w~.-])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}(?![\w~.-])",
        "q~",
    ),
    _token("alibaba_key_id", "LTAI", r"[A-Za-z0-9]{20}" + _END),  # alibaba-access-key-id
    _token("cloudflare_ca_key", "v1.0-", f"{_HEX}{{24}}-{_HEX}{{146}}"),  # cloudflare-origin-ca-key
    _token("cloudflare_token", "cfut_", r"[A-Za-z0-9]{40,}+"),  # trufflehog cloudflareapitoken
    _shape("flyio_token", r"f(?<![\w-]f)[mo][12]_[A-Za-z0-9_+/=-]{40,}+", "fo1_", "fm1_", "fm2_"),
    _token("netlify_token", "nfp_", r"[A-Za-z0-9_]{36,}+"),  # trufflehog netlify
    _shape("supabase_token", r"s(?<![\w-]s)bp_(?:oauth_)?[a-f0-9]{40}", "sbp_"),  # supabasetoken
    _token("supabase_token", "sb_secret_", r"[A-Za-z0-9_-]{20,}+"),
    _token("databricks_token", "dapi", f"{_HEX}{{32}}(?:-\\d)?"),  # databricks-api-token
    _shape("planetscale_token", r"p(?<![\w-]p)scale_(?:tkn|pw|oauth)_[\w=.-]{32,64}", "pscale_"),
    _shape("doppler_token", r"d(?<![\w-]d)p\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}+", "dp."),
    _token("pulumi_token", "pul-", f"{_HEX}{{40}}"),  # pulumi-api-token
    # hashicorp-tf-api-token: 14 characters, .atlasv1., 60+ more
    _shape("terraform_token", r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,}+", "atlasv1."),
    # vault-service-token (legacy): s. and 24 characters, digits and capitals among them
    _shape(
        "vault_token",
        r"s(?<![\w.-]s)\.(?=[a-zA-Z]{0,23}\d)(?=[a-z0-9]{0,23}[A-Z])[A-Za-z0-9]{24}(?![\w.-])",
        "s.",
    ),
    _token(  # 1password-secret-key
        "onepassword_key",
        "A3-",
        r"[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}",
    ),
    _token("onepassword_token", "ops_eyJ", r"[A-Za-z0-9+/]{200,}+={0,3}"),  # 1password-service-…
    _token("age_secret_key", "AGE-SECRET-KEY-1", r"[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
    _shape("ngrok_token", r"2(?<![\w-]2)[A-Za-z0-9]{26}_\d[A-Za-z0-9]{20}" + _END),  # trufflehog
    _token("clickhouse_secret", "4b1d", r"[A-Za-z0-9]{38}" + _END),  # clickhouse-cloud-api-secret…
    _token("openshift_token", "sha256~", r"[\w-]{43}"),  # openshift-user-token
    # --- developer tools -----------------------------------------------------------------------
    _token("sourcegraph_token", "sgp_", r"(?:(?:[a-fA-F0-9]{16}|local)_)?[a-fA-F0-9]{40}"),
    _shape("circleci_token", r"C(?<![\w-]C)CIP(?:AT|RJ)_[A-Za-z0-9]{22}_[a-f0-9]{40}", "ccip"),
    _token("buildkite_token", "bkua_", r"[a-z0-9]{40}"),  # trufflehog buildkite
    _token("octopus_key", "API-", r"[A-Z0-9]{26}" + _END),  # octopus-deploy-api-key
    _shape(  # harness-api-key
        "harness_token",
        r"[ps](?<![\w-][ps])at\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}",
        "pat.",
        "sat.",
    ),
    _shape("sonar_token", r"s(?<![\w-]s)q[pua]_[a-f0-9]{40}", "sqp_", "squ_", "sqa_"),
    _shape(  # launchdarkly-access-token
        "launchdarkly_key", r"(?:api|sdk)(?<![\w-]api)(?<![\w-]sdk)-" + _UUID, "api-", "sdk-"
    ),
    _token("infracost_token", "ico-", r"[A-Za-z0-9]{32}"),  # infracost-api-token
    _token("prefect_token", "pnu_", r"[A-Za-z0-9]{36}"),  # prefect-api-token
    _token("readme_token", "rdme_", r"[a-z0-9]{70}"),  # readme-api-token
    _token("postman_token", "PMAK-", f"{_HEX}{{24}}-{_HEX}{{34}}"),  # postman-api-token
    _shape("settlemint_token", r"s(?<![\w-]s)m_(?:pat|aat|sat)_[A-Za-z0-9]{16}", "sm_"),
    _token("frameio_token", "fio-u-", r"[A-Za-z0-9_=-]{64}"),  # frameio-api-token
    _token("linear_token", "lin_api_", r"[A-Za-z0-9]{40}"),  # linear-api-key
    _token("notion_token", "ntn_", r"\d{11}[A-Za-z0-9]{32,}+"),  # notion-api-token
    _token("airtable_token", "pat", r"[A-Za-z0-9]{14}\.[a-f0-9]{64}", "pat"),  # airtable-personnal…
    _token("typeform_token", "tfp_", r"[A-Za-z0-9_.=-]{59}"),  # typeform-api-token
    _token("adobe_secret", "p8e-", r"[A-Za-z0-9]{32}"),  # adobe-client-secret
    _shape(  # authress-service-client-access-key
        "authress_key",
        r"(?:sc|ext|scauth|authress)_[a-z0-9]{5,30}\.[a-z0-9]{4,6}\.acc[_-][a-z0-9-]{10,32}"
        r"\.[A-Za-z0-9+/_=-]{30,120}",
        ".acc_",
        ".acc-",
    ),
    _shape("maxmind_key", r"(?<![\w-])[A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk" + _END, "_mmk"),
    _shape("intra42_secret", r"s(?<![\w-]s)-s4t2(?:ud|af)-[a-f0-9]{64}", "s-s4t2"),
    _token("figma_token", "figd_", r"[\w-]{40,}+"),  # trufflehog figmapersonalaccesstoken
    _token("posthog_key", "phx_", r"[A-Za-z0-9_]{43,}+"),  # trufflehog posthog
    _token("huggingface_token", "hf_", r"[A-Za-z]{34}" + _END),  # huggingface-access-token
    _token("huggingface_token", "api_org_", r"[A-Za-z]{34}" + _END),
    _token("clojars_token", "CLOJARS_", r"[a-z0-9]{60}"),  # clojars-api-token
    _token("artifactory_token", "cmVmd", r"[A-Za-z0-9]{59}" + _END),  # artifactory-reference-…
    _token("nuget_key", "oy2", r"[a-z0-9]{43}" + _END),  # trufflehog nugetapikey
    _shape("sentry_token", r"s(?<![\w-]s)ntry[us]_[A-Za-z0-9+/=_-]{64,}+", "sntry"),
    # --- commerce, messaging, monitoring --------------------------------------------------------
    _token("salesforce_token", "00D", r"[A-Za-z0-9]{12,15}![A-Za-z0-9_.]{50,}+"),  # salesforce
    _token("square_token", "sq0atp-", r"[\w-]{22,}+"),  # square-access-token
    _shape(  # Braintree's documented access-token form
        "braintree_token", r"access_token\$(?:production|sandbox)\$[a-z0-9]{16}\$[a-f0-9]{32}", "$"
    ),
    _shape("easypost_key", r"E(?<![\w-]E)Z[AT]K[A-Za-z0-9]{54}", "ezak", "eztk"),
    # gocardless-api-token (live_ + 40), lob-api-key ((live|test)_ + 35 hex)
    _token("payment_key", "live_", r"(?=[\w=-]{0,40}\d)[A-Za-z0-9_=-]{32,}+"),
    _token("payment_key", "test_", f"{_HEX}{{35}}" + _END),
    _token("payment_key", "sandbox_", r"(?=[\w=-]{0,40}\d)[A-Za-z0-9_=-]{40}"),
    _shape("brevo_key", r"x(?<![\w-]x)(?:keysib|smtpsib)-[a-f0-9]{64}-[A-Za-z0-9]{16}", "sib-"),
    _token("intercom_token", "dG9rO", r"[A-Za-z0-9+/_-]{40,}+=*+"),  # base64 of "tok:" (intercom)
    _shape(
        "newrelic_key", r"N(?<![\w-]N)R(?:AK|II|JS)-[A-Za-z0-9-]{19,}+", "nrak-", "nrii-", "nrjs-"
    ),
    _shape("newrelic_key", r"(?<![\w-])[a-f0-9]{32}FFFFNRAL" + _END, "ffffnral"),
    # --- model providers -------------------------------------------------------------------------
    _token("perplexity_key", "pplx-", r"[A-Za-z0-9]{48}"),  # perplexity-api-key
    _token("groq_key", "gsk_", r"[A-Za-z0-9]{52}"),  # trufflehog groq
    _token("xai_key", "xai-", r"[A-Za-z0-9]{80}"),  # trufflehog xai
    _token("replicate_token", "r8_", r"[A-Za-z0-9]{37}"),  # trufflehog replicate
    _token("pinecone_key", "pcsk_", r"[A-Za-z0-9]{4,10}_[A-Za-z0-9]{40,}+"),  # trufflehog pinecone
    _token("elevenlabs_key", "sk_", f"{_HEX}{{48}}" + _END),  # trufflehog elevenlabs
    _shape("langsmith_key", r"l(?<![\w-]l)sv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}", "lsv2_"),
    _token("nvidia_key", "nvapi-", r"[\w-]{64}"),  # trufflehog nvapi
    # --- frameworks ------------------------------------------------------------------------------
    _token("jwt_base64", "ZXlK", r"[A-Za-z0-9+/]{60,}+=*+"),  # jwt-base64: base64 of "eyJ"
    # bcrypt/htpasswd hashes: crackable offline, as good as the password for a weak one
    _shape("password_hash", r"\$(?<![\w$]\$)2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}", "$2"),
    _token("django_secret_key", "django-insecure-", r"[^\s'\"`]{40,}+"),  # Django's startproject
    _token("laravel_app_key", "base64:", r"[A-Za-z0-9+/]{43}="),  # Laravel's key:generate
    _token("session", "node0", r"[a-z0-9]{20,}+\d*\.node0"),  # Jetty's JSESSIONID
    _token("session", "s%3A", r"[A-Za-z0-9_-]{20,}+\.[A-Za-z0-9%_-]{20,}+"),  # express connect.sid
    _token("session", "eyJpdiI6", r"[A-Za-z0-9+/=%]{40,}+"),  # Laravel's encrypted cookie
)
