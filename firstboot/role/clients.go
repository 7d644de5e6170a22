package role

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/firstboot/kubeletclient"
)

// clients owns how the role reaches the apiservers: as the agent
// (system:masters, through its kubeconfig), at one master's address, or
// as this node's kubelet (what NodeRestriction lets a kubelet do).
type clients struct {
	env nodeEnv
	// apiAt is Node.APIAt: nil means the agent's kubeconfig.
	apiAt func(address string) (kubernetes.Interface, error)
}

// agent is the agent's client through the discovery name, like every
// other client; with an address, it talks to that master's apiserver
// only (its certificate names the address too).
func (c clients) agent(address string) (*cluster, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.env.path(nodefile.AgentKubeconfig))
	if err != nil {
		return nil, fmt.Errorf("the agent's kubeconfig %s: %w", nodefile.AgentKubeconfig, err)
	}
	if address != "" {
		cfg.Host = "https://" + net.JoinHostPort(address, strconv.Itoa(c.env.file.Cluster.APIServerPort))
	}
	cfg.Timeout = 30 * time.Second
	return newCluster(cfg, c.env.log)
}

// kubeAt is a client of the apiserver at a master's address: Node.APIAt,
// or the agent's own kubeconfig pointed at that address.
func (c clients) kubeAt(address string) (kubernetes.Interface, error) {
	if c.apiAt != nil {
		return c.apiAt(address)
	}
	cl, err := c.agent(address)
	if err != nil {
		return nil, err
	}
	return cl.kube, nil
}

// kubelet talks to the cluster as this node's kubelet.
func (c clients) kubelet() (kubernetes.Interface, error) { return kubeletclient.New(c.env.root) }
