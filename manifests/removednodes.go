package manifests

import (
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kiln-project/kiln/contract/removednodes"
)

// RemovedNodesPolicy names the admission policy, and its binding, that
// refuses a removed node's credentials.
const RemovedNodesPolicy = "kiln-removed-nodes"

// RemovedNodesDenial is the end of the policy's refusal, after the node's
// name.
const RemovedNodesDenial = ": removed by kiln node remove; re-image it with new credentials and kiln node admit"

// removedNodes refuses, to the credentials of a node listed in the
// removed-nodes ConfigMap (package removednodes), a certificate request
// (so it cannot renew itself) and a create or update of Node objects (so
// it cannot register or report again), unless the request authenticates
// with a credential the node's entry admits. Kubernetes has no
// revocation of client certificates: what the Node authorizer still
// lets the certificate read, it reads until it expires. No ConfigMap is
// no node removed (parameterNotFoundAction Allow).
//
// The match condition keeps every other user out of the policy, so an
// error in it can only refuse a node's own requests, never an
// administrator's (failurePolicy Fail: a removed node must not get
// through on an error). The credential is matched as a whole token of
// the entry, with the spaces around it.
func removedNodes() []runtime.Object {
	fail, allow, forbidden := admissionv1.Fail, admissionv1.AllowAction, metav1.StatusReasonForbidden
	policy := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta: typeMeta("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"), ObjectMeta: clusterMeta(RemovedNodesPolicy),
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			ParamKind:     &admissionv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{
				{RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule: admissionv1.Rule{APIGroups: []string{"certificates.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"certificatesigningrequests"}}}},
				{RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes", "nodes/status"}}}},
			}},
			MatchConditions: []admissionv1.MatchCondition{{Name: "node-credentials", Expression: `request.userInfo.username.startsWith('system:node:')`}},
			Variables: []admissionv1.Variable{
				{Name: "node", Expression: `request.userInfo.username.substring(12)`},
				{Name: "entry", Expression: `has(params.data) && variables.node in params.data ? params.data[variables.node] : ''`},
				{Name: "credential", Expression: `'` + removednodes.CredentialIDKey + `' in request.userInfo.extra && size(request.userInfo.extra['` +
					removednodes.CredentialIDKey + `']) == 1 ? request.userInfo.extra['` + removednodes.CredentialIDKey + `'][0] : ''`},
			},
			Validations: []admissionv1.Validation{{
				Expression:        `variables.entry == '' || (variables.credential != '' && (' ' + variables.entry + ' ').contains(' ' + variables.credential + ' '))`,
				MessageExpression: `variables.node + '` + RemovedNodesDenial + `'`,
				Reason:            &forbidden,
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta: typeMeta("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"), ObjectMeta: clusterMeta(RemovedNodesPolicy),
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: RemovedNodesPolicy,
			ParamRef: &admissionv1.ParamRef{Name: removednodes.Name, Namespace: removednodes.Namespace,
				ParameterNotFoundAction: &allow},
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	return []runtime.Object{policy, binding}
}
